package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// A forming generation on etcd, as one node sees it (the keys: etcdRegistration, etcdWorld). The node holding the first
// registration key (the lowest instance id registered) counts the registrations: it reads them, watches
// members/ from there, runs the last call and proposes the world. Every other node watches one key while the
// world forms: the first registration key it knows of (its registration read it), or the one whose registration
// took the count from it. When that key vanishes, it asks which key is first now; if its own, it counts. So the
// lowest live key's node always counts or is about to: when it registered first it counted, and it stops only
// for a lower key, whose vanishing it then watches; when it registered after a lower key, it watches that one,
// and each lower key it learns of must vanish before its own is lowest. Once the world is settled, a node watches
// members/ for deletions only (lost nodes), from the revision the world was chosen at.

// await waits for the world and settles it. The node that counts the registrations proposes the world when max
// nodes are registered, or when min are and the last call is over. It ends at once when the generation fails (its
// nodes ask for different size ranges, or disagree), the job closes or etcd is lost.
func (s *etcdSession) await(ctx context.Context) (*rendezvous.Assignment, error) {
	start := time.Now()
	var lc lastCall
	defer lc.stop()
	defer s.progress(ctx)()
	defer func() {
		s.mu.Lock()
		s.stopCounting()
		s.stopAhead()
		s.mu.Unlock()
	}()
	proposed := false
	for {
		v := s.joinState()
		if v.asg != nil || v.err != nil {
			return v.asg, v.err
		}
		acted, err := s.act(ctx, v, &proposed)
		if !acted {
			err = s.pause(ctx, v, &lc)
		}
		if err != nil {
			if ctx.Err() != nil && s.h.failed() == nil {
				return nil, s.joinTimedOut(ctx, start)
			}
			return nil, err
		}
	}
}

// act does what the join's state v asks for next: settle the world, ask which registration is first, count
// them, watch the one ahead, or propose the world (once: proposed); it reports whether there was anything to do.
func (s *etcdSession) act(ctx context.Context, v joinView, proposed *bool) (bool, error) {
	switch {
	case v.world != nil:
		return true, s.settleWorld(ctx, v.world)
	case v.recheck:
		return true, s.recheckFirst(ctx)
	case v.count:
		return true, s.startCounting(ctx)
	case v.ahead != "":
		s.watchAhead(v.ahead, v.aheadRev)
		return true, nil
	case v.counting && v.live >= s.max && !*proposed:
		*proposed = true
		return true, s.propose(ctx)
	}
	return false, nil
}

// pause waits for the join's state to change, for its end (ctx), or for the end of the last call, which runs
// while the node counting the registrations has min..max-1 of them: then it proposes the world of those.
func (s *etcdSession) pause(ctx context.Context, v joinView, lc *lastCall) error {
	lc.track(ctx, v.counting && v.live >= s.min && v.live < s.max, s.lastCall)
	select {
	case <-v.ch:
	case <-lc.c:
		lc.stop()
		if v := s.joinState(); v.counting && v.live >= s.min {
			s.log.Info("rendezvous last call over", zap.Int("nodes", v.live))
			return s.propose(ctx)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// joinView is where a join stands (joinState).
type joinView struct {
	asg      *rendezvous.Assignment
	err      error
	world    []byte // read, to settle
	recheck  bool   // the registration it watched vanished: which is first now?
	count    bool   // it holds the first key and does not count yet
	ahead    string // the registration to watch (the watch is not open yet), from aheadRev
	aheadRev int64
	counting bool
	live     int // registrations live, when it counts
	ch       <-chan struct{}
}

// joinState is where the join stands: the agreed world, or why there is none for this node (the generation
// failed, the job closed, etcd is lost), else what to do next and the channel that says when that changes.
func (s *etcdSession) joinState() joinView {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := joinView{ch: s.changed}
	switch {
	case s.asg != nil:
		v.asg = s.asg
	case s.worldErr != nil:
		v.err = s.worldErr
	case s.closed != nil:
		v.err = s.closed
	case s.h.failed() != nil:
		v.err = s.h.failed()
	case s.world != nil:
		v.world = s.world
	case s.recheck:
		v.recheck = true
	case s.first && s.tally == nil:
		v.count = true
	case s.ahead != "" && s.unahead == nil:
		v.ahead, v.aheadRev = s.ahead, s.aheadRev
	case s.tally != nil:
		v.counting, v.live = true, len(s.tally.live)
	}
	return v
}

// joinTimedOut is the error of a join whose context ended: ErrMissingNodes naming who never arrived when its
// deadline passed (every node that registered counts as arrived: the others may have given up and gone just
// before this node).
func (s *etcdSession) joinTimedOut(ctx context.Context, start time.Time) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	var arrived []rendezvous.Member
	rctx, cancel := s.h.bind(context.Background())
	defer cancel()
	rctx, cancelRead := context.WithTimeout(rctx, s.e.cfg.Heartbeat)
	defer cancelRead()
	if r, err := s.e.get(rctx, s.dir+"arrived/", clientv3.WithPrefix()); err == nil {
		for _, kv := range r.Kvs {
			var reg etcdRegistration
			if json.Unmarshal(kv.Value, &reg) == nil {
				arrived = append(arrived, reg.Member)
			}
		}
	} else {
		arrived = append(arrived, s.self)
	}
	sort.Slice(arrived, func(i, j int) bool { return arrived[i].Host < arrived[j].Host })
	return s.e.otherJobs(rctx, s.self.RunID, agree.Missing(s.self.Generation, s.min, s.max, arrived, nil, time.Since(start)))
}

// lastCall is the timer of an elastic join's last call: it runs while min..max-1 nodes are registered.
type lastCall struct {
	t *time.Timer
	c <-chan time.Time
}

// track starts the timer (d, or 9/10 of the time left to ctx's deadline: the join timeout ends the last call
// too) when on and not running, and stops it when off.
func (l *lastCall) track(ctx context.Context, on bool, d time.Duration) {
	switch {
	case on && l.t == nil:
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl)*9/10)
		}
		l.t = time.NewTimer(d)
		l.c = l.t.C
	case !on && l.t != nil:
		l.stop()
	}
}

func (l *lastCall) stop() {
	if l.t != nil {
		l.t.Stop()
	}
	l.t, l.c = nil, nil
}
