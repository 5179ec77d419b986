package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// A forming generation on etcd, as one node sees it (etcdWorld has the keys). The node holding the first
// registration key (the lowest instance id registered) counts the registrations: it reads them, watches
// members/ from there, runs the last call and proposes the world. Every other node watches one key while the
// world forms: the first registration key it knows of (its registration read it), or the one whose registration
// took the count from it. When that key vanishes, it asks which key is first now; if its own, it counts. So the
// lowest live key's node always counts or is about to: when it registered first it counted, and it stops only
// for a lower key, whose vanishing it then watches; when it registered after a lower key, it watches that one,
// and each lower key it learns of must vanish before its own is lowest. Once the world is settled, a node watches
// members/ for deletions only (lost nodes), from the revision the world was chosen at.

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
