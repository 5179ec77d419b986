package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// Barriers and gathers on etcd complete by a count, not by every node hearing every arrival: a node's arrival is a
// key (barriers/<name>/<rank> on its lease, data/<key>/<rank> on the job's), written in a transaction that also
// counts the keys there; the arrival that makes them the world's size writes all/done/<kind>/<name>, which every
// node watches (all/). A gather then reads what every node published, once.

// arrive writes this node's key of a barrier or gather (kind/name/<rank>, on lease) and counts the keys there in
// the same transaction: the arrival that makes them the world's size says the barrier or gather is complete
// (all/done/kind/name). Every node thus hears of it once, not of every arrival.
func (s *etcdSession) arrive(ctx context.Context, kind, name string, val []byte, lease clientv3.LeaseID) error {
	dir := s.dir + kind + "/" + name + "/"
	r, err := s.e.txn(ctx, "put "+kind+"/"+name, func(t clientv3.Txn) clientv3.Txn {
		return t.Then(clientv3.OpPut(dir+strconv.Itoa(s.rank), string(val), clientv3.WithLease(lease)),
			clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	})
	if err != nil {
		return s.opErr("put "+kind+"/"+name, err)
	}
	if r.Responses[1].GetResponseRange().Count >= int64(s.n) {
		return s.complete(ctx, kind, name)
	}
	return nil
}

// complete says that every node arrived at kind/name (all/done/kind/name, on the job's lease: it outlives the node
// that wrote it, so that none of the others misses it).
func (s *etcdSession) complete(ctx context.Context, kind, name string) error {
	key := s.dir + "all/done/" + kind + "/" + name
	if _, err := s.e.txn(ctx, "complete "+kind+"/"+name, func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, "", clientv3.WithLease(s.job.lease)))
	}); err != nil {
		return s.opErr("complete "+kind+"/"+name, err)
	}
	return nil
}

// present reads which ranks have a key under kind/name (with their values when vals).
func (s *etcdSession) present(ctx context.Context, kind, name string, vals bool) (map[int][]byte, error) {
	dir := s.dir + kind + "/" + name + "/"
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if !vals {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	r, err := s.e.get(ctx, dir, opts...)
	if err != nil {
		return nil, s.opErr("read "+kind+"/"+name, err)
	}
	out := make(map[int][]byte, len(r.Kvs))
	for _, kv := range r.Kvs {
		rank, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), dir))
		if err != nil || rank < 0 || rank >= s.n {
			s.log.Warn("ignoring a foreign etcd key", zap.ByteString("key", kv.Key))
			continue
		}
		out[rank] = kv.Value
	}
	return out, nil
}

// late is the ErrTimeout error of a barrier or gather that ended before every node arrived, naming those that did
// not (read from etcd: which keys are there).
func (s *etcdSession) late(kind, name string, detail string) error {
	ctx, cancel := s.h.bind(context.Background())
	defer cancel()
	ctx, cancelRead := context.WithTimeout(ctx, s.e.cfg.Heartbeat)
	defer cancelRead()
	present, err := s.present(ctx, kind, name, false)
	if err == nil {
		err = s.needNodes(ctx)
	}
	if err != nil {
		return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("%s %q: %s (which did not, etcd did not say: %v)", strings.TrimSuffix(kind, "s"), name, detail, err))
	}
	s.mu.Lock()
	var late []rendezvous.NodeRef
	for i, m := range s.nodes {
		if _, ok := present[s.ranks[i]]; !ok {
			late = append(late, m.Ref(s.ranks[i]))
		}
	}
	s.mu.Unlock()
	sort.Slice(late, func(i, j int) bool { return late[i].Rank < late[j].Rank })
	return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("%s %q: %s", strings.TrimSuffix(kind, "s"), name, detail), late...)
}

// Barrier puts this node's arrival on its lease (a node lost after arriving took it along: the barrier cannot
// complete without it) and waits until the barrier is complete, or a node of the world is lost.
func (s *etcdSession) Barrier(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if err := s.arrive(ctx, "barriers", name, []byte{1}, s.lease); err != nil {
		return err
	}
	var lerr error
	err := s.wait(ctx, func() bool {
		if s.done["barriers/"+name] {
			return true
		}
		if len(s.lost) > 0 {
			lerr = &rendezvous.NodeLostError{Node: s.lost[0].Node, Generation: s.self.Generation, Detail: fmt.Sprintf("barrier %q cannot complete without it", name)}
			return true
		}
		return false
	})
	switch {
	case lerr != nil:
		return lerr
	case errors.Is(err, context.DeadlineExceeded):
		return s.late("barriers", name, "these nodes did not arrive in time")
	}
	return err
}

// Publish stores data on the job's lease: results must outlive the node that published them.
func (s *etcdSession) Publish(ctx context.Context, key string, data []byte) error {
	if err := checkName(key); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.arrive(ctx, "data", key, data, s.job.lease)
}

// Gather waits until the gather is complete, then reads what every node published. A node lost meanwhile fails it
// only if it is gone without publishing (its data outlives it).
func (s *etcdSession) Gather(ctx context.Context, key string) (map[int][]byte, error) {
	if err := checkName(key); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	checked := 0 // the lost nodes checked so far
	for {
		var lost []rendezvous.Failure
		err := s.wait(ctx, func() bool {
			lost = slices.Clone(s.lost[checked:])
			return s.done["data/"+key] || len(lost) > 0
		})
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, s.late("data", key, "these nodes did not publish in time")
		}
		if err != nil {
			return nil, err
		}
		got, err := s.present(ctx, "data", key, true)
		if err != nil {
			return nil, err
		}
		if len(got) >= s.n {
			if len(lost) > 0 {
				// complete, and nobody may have said so: the node whose arrival completed it may be the one lost
				if err := s.complete(ctx, "data", key); err != nil {
					return nil, err
				}
			}
			return got, nil
		}
		for _, f := range lost {
			if _, ok := got[f.Node.Rank]; !ok {
				return nil, &rendezvous.NodeLostError{Node: f.Node, Generation: s.self.Generation, Detail: fmt.Sprintf("gather %q cannot complete: it is gone without publishing", key)}
			}
		}
		checked += len(lost)
	}
}
