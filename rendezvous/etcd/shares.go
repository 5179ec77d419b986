package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// The agreed world on etcd is written once by the node that proposes it, under world/<by>/ (by: its instance),
// and each node reads only its share of it: a thousand nodes reading the whole world (a thousand registrations)
// made etcd serve a million registrations, and then it renewed the nodes' leases too late. Under world/<by>/:
//   - c/<i>: the registrations in registration order, encoded by column (chunks of worldChunk bytes at most);
//   - ranks: their ranks, a JSON array in the same order;
//   - all: what every node's assignment shares (Assignment, NodeRank and Nodes aside);
//   - n/<instance>: each node of the world (its Node: rank, name, address, first global rank);
//   - s/<slice>: in a world of fixed slices (TPU hosts), each slice's nodes in rank order, once per slice.
// all/world then holds the head alone (etcdWorld): a few hundred bytes that every node's watch of all/ delivers.
// A node reads its own node, all and its slice's nodes: its share's size, never the world's. The registrations
// and ranks are read by a node only to name nodes that are lost or late (needNodes), once.

// txnOps is the most operations the world is written with per transaction: etcd refuses more than 128 by default
// (--max-txn-ops).
const txnOps = 100

// worldPut is one key of the world to write.
type worldPut struct{ key, val string }

// worldKeys lays out the world of members (with their ranks) under dir's world/<by>/; fixed: every node's share
// names its slice's nodes.
func worldKeys(dir, by string, members []rendezvous.Member, ranks []int) (puts []worldPut, nchunks int, fixed bool) {
	base := dir + "world/" + by + "/"
	cs := chunks(members, worldChunk)
	for i, c := range cs {
		puts = append(puts, worldPut{fmt.Sprintf("%sc/%06d", base, i), string(c)})
	}
	agreed := agree.AgreeWorld(members, ranks)
	rb, _ := json.Marshal(ranks)
	all, _ := json.Marshal(agreed.All)
	puts = append(puts, worldPut{base + "ranks", string(rb)}, worldPut{base + "all", string(all)})
	fixed = !slices.ContainsFunc(members, func(m rendezvous.Member) bool { return m.UnevenWorkers })
	nodes := make([]rendezvous.Node, len(members)) // by rank
	have := make([]bool, len(members))
	for r := range members {
		if have[r] {
			continue
		}
		share := agreed.Share(r, false).Nodes // its slice's nodes when fixed, else itself
		for _, n := range share {
			nodes[n.Rank], have[n.Rank] = n, true
		}
		if fixed {
			sb, _ := json.Marshal(share)
			puts = append(puts, worldPut{base + "s/" + strconv.Itoa(share[0].SliceID), string(sb)})
		}
	}
	for _, n := range nodes {
		nb, _ := json.Marshal(n)
		puts = append(puts, worldPut{base + "n/" + n.Instance, string(nb)})
	}
	return puts, len(cs), fixed
}

// putWorld writes puts on lease, in transactions of txnOps keys and about worldChunk bytes at most.
func (e *etcdStore) putWorld(ctx context.Context, puts []worldPut, lease clientv3.LeaseID) error {
	for len(puts) > 0 {
		n, size := 0, 0
		for n < len(puts) && n < txnOps && (n == 0 || size+len(puts[n].val) <= worldChunk) {
			size += len(puts[n].val)
			n++
		}
		ops := make([]clientv3.Op, n)
		for i, p := range puts[:n] {
			ops[i] = clientv3.OpPut(p.key, p.val, clientv3.WithLease(lease))
		}
		if _, err := e.txn(ctx, "write the world", func(t clientv3.Txn) clientv3.Txn { return t.Then(ops...) }); err != nil {
			return err
		}
		puts = puts[n:]
	}
	return nil
}

// propose writes the outcome of the world of the first max registrations the node counts (registered): the
// world under world/<by>/, then its head in all/world by a transaction (the first proposal wins; a later one
// deletes what it wrote); or why they cannot be a world, in all/world alone.
func (s *etcdSession) propose(ctx context.Context) error {
	members, rev := s.registered()
	if len(members) == 0 {
		return nil // it stopped counting: the node that counts now proposes
	}
	ctx, cancel := s.h.bind(ctx)
	defer cancel()
	w := etcdWorld{NNodes: s.max, MinNodes: s.min, Nodes: len(members), Rev: rev, By: s.self.Instance}
	ranks, err := agree.AssignRanks(members, len(members))
	if err == nil {
		err = agree.Agree(members, ranks, s.self.Generation)
	}
	if err != nil {
		w = etcdWorld{Error: agree.ToWire(err)}
	} else {
		var puts []worldPut
		puts, w.Chunks, w.Fixed = worldKeys(s.dir, w.By, members, ranks)
		if err := s.e.putWorld(ctx, puts, s.job.lease); err != nil {
			return s.opErr("write the world", err)
		}
	}
	b, _ := json.Marshal(w)
	key := s.dir + "all/world"
	r, err := s.e.txn(ctx, "agree on the world", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b), clientv3.WithLease(s.job.lease)))
	})
	if err != nil {
		return s.opErr("agree on the world", err)
	}
	if !r.Succeeded && w.By != "" {
		_, _ = s.e.cli.Delete(ctx, s.dir+"world/"+w.By+"/", clientv3.WithPrefix()) // tidiness: the job's lease ends them anyway
	}
	return nil
}

// parseWorld decodes the head of dir's world key.
func parseWorld(dir string, val []byte) (*etcdWorld, error) {
	var w etcdWorld
	if err := json.Unmarshal(val, &w); err != nil || (w.Error == nil && (w.Nodes < 1 || w.Chunks < 1 || w.By == "")) {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %sall/world holds %.80q, not a world", dir, val))
	}
	return &w, nil
}

// readShare reads the share of node inst in the world w at dir: its assignment (nil when the world was closed
// without it) and the bytes it read.
func (e *etcdStore) readShare(ctx context.Context, dir string, w *etcdWorld, inst string) (*rendezvous.Assignment, int, error) {
	base := dir + "world/" + w.By + "/"
	r, err := e.txn(ctx, "read this node's share of the world", func(t clientv3.Txn) clientv3.Txn {
		return t.Then(clientv3.OpGet(base+"n/"+inst), clientv3.OpGet(base+"all"))
	})
	if err != nil {
		return nil, 0, e.unreachable("read this node's share of the world", err)
	}
	nk, ak := r.Responses[0].GetResponseRange().Kvs, r.Responses[1].GetResponseRange().Kvs
	var a rendezvous.Assignment
	if len(ak) == 0 || json.Unmarshal(ak[0].Value, &a) != nil {
		return nil, 0, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %sall/world names a world whose key %sall is missing or malformed", dir, base))
	}
	read := len(ak[0].Value)
	if len(nk) == 0 {
		return nil, read, nil
	}
	var node rendezvous.Node
	read += len(nk[0].Value)
	if json.Unmarshal(nk[0].Value, &node) != nil || node.Rank < 0 || node.Rank >= w.Nodes {
		return nil, read, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %sn/%s holds %.80q, not a node of a world of %d", base, inst, nk[0].Value, w.Nodes))
	}
	a.NodeRank, a.Nodes = node.Rank, []rendezvous.Node{node}
	if !w.Fixed {
		return &a, read, nil
	}
	key := base + "s/" + strconv.Itoa(node.SliceID)
	sr, err := e.get(ctx, key)
	if err != nil {
		return nil, read, e.unreachable("read this node's slice", err)
	}
	if len(sr.Kvs) == 0 || json.Unmarshal(sr.Kvs[0].Value, &a.Nodes) != nil || len(a.Nodes) == 0 {
		return nil, read, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s is missing or not a slice's nodes", key))
	}
	return &a, read + len(sr.Kvs[0].Value), nil
}

// readWorld reads the registrations of the world w at dir, in registration order, and their ranks.
func (e *etcdStore) readWorld(ctx context.Context, dir string, w *etcdWorld) ([]rendezvous.Member, []int, error) {
	base := dir + "world/" + w.By + "/"
	r, err := e.txn(ctx, "read the world", func(t clientv3.Txn) clientv3.Txn {
		return t.Then(clientv3.OpGet(base+"c/", clientv3.WithPrefix()), clientv3.OpGet(base+"ranks"))
	})
	if err != nil {
		return nil, nil, e.unreachable("read the world", err)
	}
	ck, rk := r.Responses[0].GetResponseRange().Kvs, r.Responses[1].GetResponseRange().Kvs
	var ranks []int
	if len(ck) != w.Chunks || len(rk) == 0 || json.Unmarshal(rk[0].Value, &ranks) != nil || len(ranks) != w.Nodes {
		return nil, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd keys %s: %d chunks of %d, or no ranks of %d nodes", base, len(ck), w.Chunks, w.Nodes))
	}
	members := make([]rendezvous.Member, 0, w.Nodes)
	for _, kv := range ck { // in key order: the chunks' order
		part, err := decodeColumns(kv.Value)
		if err != nil {
			return nil, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s: not a part of the world: %v", kv.Key, err))
		}
		members = append(members, part...)
	}
	if len(members) != w.Nodes {
		return nil, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd keys %sc/ hold %d nodes of a world of %d", base, len(members), w.Nodes))
	}
	return members, ranks, nil
}
