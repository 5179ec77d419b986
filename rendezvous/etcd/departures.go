package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
)

// departed records that a registration of the world vanished (its node's lease expired or was revoked): that
// node is lost. Its rank and name are in the world's registrations, which a node reads at the first loss only
// (needNodes): until then the loss waits in pending. With s.mu held.
func (s *etcdSession) departed(ev *clientv3.Event) {
	if ev.Type != clientv3.EventTypeDelete {
		return
	}
	inst := strings.TrimPrefix(string(ev.Kv.Key), s.dir+"members/")
	if s.nodes != nil {
		s.lostMember(inst)
		return
	}
	s.pending = append(s.pending, inst)
	if !s.loading {
		s.loading = true
		s.wg.Go(func() {
			if err := s.needNodes(s.wctx); err != nil {
				s.unnamed(err)
			}
		})
	}
}

// needNodes reads the world's registrations and their ranks once (a node needs them only to name the nodes lost
// or late), and records the losses that waited for them.
func (s *etcdSession) needNodes(ctx context.Context) error {
	s.mu.Lock()
	w, have := s.agreed, s.nodes != nil
	s.mu.Unlock()
	if have || w == nil {
		return nil
	}
	bctx, cancel := s.h.bind(ctx)
	defer cancel()
	members, ranks, err := s.e.readWorld(bctx, s.dir, w)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes, s.ranks = members, ranks
		for _, inst := range s.pending {
			s.lostMember(inst)
		}
		s.pending, s.loading = nil, false
		s.notify()
	}
	return nil
}

// unnamed records the losses that waited for the world's registrations when they could not be read (err): the
// nodes are lost all the same, named by their instance alone.
func (s *etcdSession) unnamed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inst := range s.pending {
		if s.lostInst[inst] {
			continue
		}
		s.lostInst[inst] = true
		f := rendezvous.Failure{Node: rendezvous.NodeRef{Rank: -1, Instance: inst}, WorkerRank: -1, Lost: true, At: time.Now(),
			Reason: fmt.Sprintf("its etcd lease expired or was revoked (lease TTL %ds; its rank is unknown: %v)", s.e.ttl, err)}
		s.lost = append(s.lost, f)
		if inst != s.self.Instance {
			s.push(f)
		}
	}
	s.pending, s.loading = nil, false
	s.notify()
}

// lostMember records that a node of the world (which did not leave: its registration then lives on the job's
// lease) is gone. With s.mu held and the world's registrations read (needNodes).
func (s *etcdSession) lostMember(inst string) {
	if s.byInst == nil { // built at the first loss, not by every node at every join
		s.byInst = make(map[string]int, len(s.nodes))
		for i, m := range s.nodes {
			s.byInst[m.Instance] = i
		}
	}
	i, in := s.byInst[inst]
	if !in || s.lostInst[inst] {
		return
	}
	ref := s.nodes[i].Ref(s.ranks[i])
	s.lostInst[inst] = true
	f := rendezvous.Failure{Node: ref, WorkerRank: -1, Lost: true, At: time.Now(),
		Reason: fmt.Sprintf("its etcd lease expired or was revoked (launcher killed or host down; lease TTL %ds)", s.e.ttl)}
	s.lost = append(s.lost, f)
	if inst != s.self.Instance {
		s.push(f)
	}
}

// testBeforeDepartures, when set, runs before a node watches its world's departures (a test compacts etcd
// there).
var testBeforeDepartures func(*etcdSession)

// departures reads the world's registrations now, when etcd compacted the departures the watch was to replay:
// every node of the world whose registration is gone is lost. The watch goes on from there.
func (s *etcdSession) departures(ctx context.Context) (int64, error) {
	if err := s.needNodes(ctx); err != nil {
		return 0, err
	}
	r, err := s.e.get(ctx, s.dir+"members/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(r.Kvs))
	for _, kv := range r.Kvs {
		live[strings.TrimPrefix(string(kv.Key), s.dir+"members/")] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.nodes {
		if !live[m.Instance] {
			s.lostMember(m.Instance)
		}
	}
	s.notify()
	return r.Header.Revision + 1, nil
}
