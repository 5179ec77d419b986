package etcd

import (
	"context"
	"errors"
	"fmt"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
)

// settled is the world a node read: its head, this node's share (nil: the world closed without it), or why this
// node is refused.
type settled struct {
	w       *etcdWorld
	asg     *rendezvous.Assignment
	refused error
}

// readSettled reads the world whose head is val: this node's share of it, not the whole world (readShare).
func (s *etcdSession) readSettled(ctx context.Context, val []byte) (settled, error) {
	w, err := parseWorld(s.dir, val)
	if err != nil || w.Error != nil {
		return settled{w: w}, err
	}
	s.worldRead.Add(int64(len(val)))
	if w.NNodes != s.e.cfg.NNodes || w.MinNodes != s.e.cfg.MinNodes {
		members, ranks, err := s.e.readWorld(ctx, s.dir, w)
		if err != nil {
			return settled{}, err
		}
		return settled{w: w, refused: w.sameSize(s.self.Generation, s.e.cfg, members, ranks, s.self.Ref(s.self.Rank))}, nil
	}
	asg, read, err := s.e.readShare(ctx, s.dir, w, s.self.Instance)
	s.worldRead.Add(int64(read))
	return settled{w: w, asg: asg}, err
}

// settle takes the agreed world as this node read it; with s.mu held.
func (s *etcdSession) settle(r settled) {
	s.world = nil
	switch {
	case r.refused != nil:
		s.worldErr = r.refused
	case r.asg == nil:
		s.worldErr = agree.NewError(rendezvous.ErrWorldFull, fmt.Sprintf("generation %d closed with %d nodes without this one", s.self.Generation, r.w.Nodes), s.self.Ref(-1))
	default:
		s.n, s.rank, s.asg, s.agreed = r.w.Nodes, r.asg.NodeRank, r.asg, r.w
	}
}

// settleWorld reads this node's share of the world whose head is the world key's value, and settles it; then it
// watches the world's registrations for deletions from the revision the world was chosen at.
func (s *etcdSession) settleWorld(ctx context.Context, val []byte) error {
	bctx, cancel := s.h.bind(ctx)
	r, err := s.readSettled(bctx, val)
	cancel()
	if err != nil && !errors.Is(err, rendezvous.ErrProtocol) {
		return s.opErr("read the world", err)
	}
	s.mu.Lock()
	switch {
	case s.asg != nil || s.worldErr != nil:
	case err != nil:
		s.world, s.worldErr = nil, err
	case r.w.Error != nil:
		s.world, s.worldErr = nil, r.w.Error.Err()
	default:
		s.settle(r)
	}
	settled := s.asg != nil
	s.stopCounting()
	s.stopAhead()
	s.mu.Unlock()
	if settled {
		if testBeforeDepartures != nil {
			testBeforeDepartures(s)
		}
		s.follow(s.wctx, etcdWatch{"the world's departures", s.dir + "members/", s.departed, []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut()},
			s.departures}, r.w.Rev+1)
	}
	return nil
}
