package etcd

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// counted folds an event of the registrations into the tally of the node that counts them. It stops counting
// when a lower key is registered (that node counts now) and watches that key instead. With s.mu held.
func (s *etcdSession) counted(ev *clientv3.Event) {
	t := s.tally
	if t == nil {
		return
	}
	t.rev = max(t.rev, ev.Kv.ModRevision)
	inst := strings.TrimPrefix(string(ev.Kv.Key), s.dir+"members/")
	switch {
	case ev.Type == clientv3.EventTypeDelete:
		t.remove(inst)
	case inst < s.self.Instance && ev.IsCreate():
		s.stopCounting()
		s.setAhead(inst, ev.Kv.ModRevision+1)
	default:
		t.put(ev.Kv.Value)
	}
}

// stopCounting ends this node's count of the registrations. With s.mu held.
func (s *etcdSession) stopCounting() {
	if s.untally != nil {
		s.untally()
	}
	s.tally, s.untally, s.first = nil, nil, false
}

// setAhead makes inst's registration the one this node watches from revision rev (the watch is opened by the
// join: unahead stops the one before). With s.mu held.
func (s *etcdSession) setAhead(inst string, rev int64) {
	s.stopAhead()
	s.ahead, s.aheadRev = inst, rev
}

// stopAhead stops watching the registration ahead. With s.mu held.
func (s *etcdSession) stopAhead() {
	if s.unahead != nil {
		s.unahead()
	}
	s.ahead, s.aheadRev, s.unahead = "", 0, nil
}

// aheadGone: the registration this node watched vanished; it asks which is first now. With s.mu held.
func (s *etcdSession) aheadGone(ev *clientv3.Event) {
	if ev.Type == clientv3.EventTypeDelete && s.ahead != "" && string(ev.Kv.Key) == s.dir+"members/"+s.ahead {
		s.stopAhead()
		s.recheck = true
	}
}

// registered is the first max live registrations in registration order, as the node counting them sees them,
// and the revision of that view (none when it stopped counting).
func (s *etcdSession) registered() ([]rendezvous.Member, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tally == nil {
		return nil, 0
	}
	return s.tally.first(s.max), s.tally.rev
}

// recheckFirst asks etcd which registration key is first now (the one this node watched vanished): its own,
// and it counts; another, and it watches that one.
func (s *etcdSession) recheckFirst(ctx context.Context) error {
	bctx, cancel := s.h.bind(ctx)
	defer cancel()
	members := s.dir + "members/"
	r, err := s.e.get(bctx, members, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return s.opErr("read the first registration", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recheck = false
	s.aheadOf(r.Kvs, r.Header.Revision)
	return nil
}

// aheadOf takes kvs, the first registration key as read at revision rev: this node counts when it is its own,
// else it watches that one. With s.mu held.
func (s *etcdSession) aheadOf(kvs []*mvccpb.KeyValue, rev int64) {
	if len(kvs) == 0 {
		return // not even its own: its lease is gone, which its keeper reports
	}
	first := strings.TrimPrefix(string(kvs[0].Key), s.dir+"members/")
	s.first = first == s.self.Instance
	if !s.first && s.tally == nil {
		s.setAhead(first, rev+1)
	}
}

// startCounting reads the registrations and counts them from there on, until the world is settled or a lower key
// is registered.
func (s *etcdSession) startCounting(ctx context.Context) error {
	bctx, cancel := s.h.bind(ctx)
	defer cancel()
	members := s.dir + "members/"
	r, err := s.e.get(bctx, members, clientv3.WithPrefix())
	if err != nil {
		return s.opErr("read the registrations", err)
	}
	s.mu.Lock()
	if s.tally != nil || !s.first {
		s.mu.Unlock()
		return nil
	}
	s.aheadOf(r.Kvs, r.Header.Revision) // a lower key registered since this node was told it held the first
	if !s.first {
		s.mu.Unlock()
		return nil
	}
	s.stopAhead()
	s.tally = newEtcdTally(r.Kvs, r.Header.Revision)
	s.log.Debug("rendezvous: this node counts the registrations", zap.Int("registered", len(s.tally.live)))
	s.mu.Unlock()
	untally := s.follow(s.wctx, etcdWatch{"the registrations", members, s.counted, []clientv3.OpOption{clientv3.WithPrefix()}, s.countAgain},
		r.Header.Revision+1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tally == nil { // stopped meanwhile
		untally()
		return nil
	}
	s.untally = untally
	s.notify()
	return nil
}

// countAgain: etcd compacted what the count's watch had to replay; the join reads the registrations again.
func (s *etcdSession) countAgain(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tally != nil {
		s.stopCounting()
		s.first = true
		s.notify()
	}
	return 0, nil
}

// askAgain: etcd compacted what the watch of the registration ahead had to replay; the join asks which is
// first now.
func (s *etcdSession) askAgain(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAhead()
	s.recheck = true
	s.notify()
	return 0, nil
}

// watchAhead opens the watch of the registration ahead of this node (inst's, from revision rev).
func (s *etcdSession) watchAhead(inst string, rev int64) {
	stop := s.follow(s.wctx, etcdWatch{"the first registration", s.dir + "members/" + inst, s.aheadGone, []clientv3.OpOption{clientv3.WithFilterPut()},
		s.askAgain}, rev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ahead != inst || s.aheadRev != rev || s.unahead != nil { // another one meanwhile
		stop()
		return
	}
	s.unahead = stop
}
