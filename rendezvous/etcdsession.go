package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdSession is one generation on etcd: a lease tying this node's keys to its liveness, and a watch on the
// generation's keys that keeps a local copy of the world.
type etcdSession struct {
	e        *etcdStore
	job      *etcdJob
	log      *zap.Logger
	dir      string
	lease    clientv3.LeaseID
	self     Member
	min, max int           // the world's size range
	lastCall time.Duration // how long an elastic join waits past min
	cancel   context.CancelFunc
	h        *health // the link to etcd: this session's lease and watches, and the job's lease

	mu       sync.Mutex
	changed  chan struct{}
	rank     int
	n        int                   // the world's size once agreed (max before)
	members  map[string]etcdMember // live registrations, by instance
	seen     map[string]etcdMember // every member that ever registered in this generation
	left     map[string]bool
	keys     map[string]map[int][]byte // barrier and data keys: "barriers/<name>" or "data/<key>" -> rank -> value
	asg      *Assignment               // the agreed world, once the world key is seen
	worldErr error                     // or why it cannot be this node's
	byInst   map[string]int            // rank of each instance of the world
	lost     []Failure
	closed   error // the job closed (*JobClosedError)
	closing  bool
	fails    chan Failure
	wg       sync.WaitGroup
}

// etcdRegistration is the value of members/<instance>: the member and the world size it asks for.
type etcdRegistration struct {
	Member
	NNodes   int `json:"nnodes"`
	MinNodes int `json:"min_nodes"`
}

type etcdMember struct {
	m      Member
	nnodes int
	min    int
	rev    int64
}

// etcdWorld is the value of the world key: the instances of the agreed world in registration order, their hosts,
// and the size range it was agreed under.
type etcdWorld struct {
	Members  []string `json:"members"`
	Hosts    []string `json:"hosts"`
	NNodes   int      `json:"nnodes"`
	MinNodes int      `json:"min_nodes"`
}

// sameSize is nil when cfg asks for the size range w was agreed under, else the *MismatchError naming both and
// who gave them.
func (w *etcdWorld) sameSize(g int, cfg *Config, self NodeRef) error {
	if w.NNodes == cfg.NNodes && w.MinNodes == cfg.MinNodes {
		return nil
	}
	vals := []string{}
	refs := []NodeRef{}
	for i, inst := range w.Members {
		ref := NodeRef{Rank: -1, Instance: inst}
		if i < len(w.Hosts) {
			ref.Host = w.Hosts[i]
		}
		vals, refs = append(vals, sizeRange(w.MinNodes, w.NNodes)), append(refs, ref)
	}
	vals, refs = append(vals, sizeRange(cfg.MinNodes, cfg.NNodes)), append(refs, self)
	return disagreement(FieldNodes, g, vals, refs)
}

func newEtcdSession(e *etcdStore, j *etcdJob, log *zap.Logger, dir string, lease clientv3.LeaseID, m Member) *etcdSession {
	return &etcdSession{e: e, job: j, log: log, dir: dir, lease: lease, self: m, rank: -1, min: e.cfg.MinNodes, max: e.cfg.NNodes, n: e.cfg.NNodes,
		lastCall: e.cfg.LastCall, changed: make(chan struct{}), members: map[string]etcdMember{}, seen: map[string]etcdMember{},
		left: map[string]bool{}, keys: map[string]map[int][]byte{}, fails: make(chan Failure, 1024), h: newHealth()}
}

// start keeps the session's lease alive and watches the generation's keys, and the job's closed record, from
// revision rev; the session's link to etcd ends when any of these, or the job's lease, fails.
func (s *etcdSession) start(ctx context.Context, rev int64) error {
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(1)
	go s.keepalive(wctx)
	stop := context.AfterFunc(s.job.h.ctx, func() { s.lose(s.job.h.failed()) })
	// a watch opens only once etcd answers: it must also end when etcd is found lost meanwhile
	vctx, vcancel := s.h.bind(wctx)
	s.cancel = func() { stop(); vcancel(); wcancel() }
	s.wg.Add(2)
	go s.watch(vctx, rev, "the generation's keys", s.dir, clientv3.WithPrefix())
	go s.watch(vctx, rev, "the job's state", s.job.closedKey())
	return nil
}

// lose ends the session's link to etcd with err (an ErrStoreLost error): every wait returns it, and the other
// nodes' loss of this one is reported on Failures, since this node can no longer see them.
func (s *etcdSession) lose(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.h.failed() != nil {
		return
	}
	s.h.end(err)
	s.log.Warn("rendezvous store lost", zap.Error(err))
	s.push(Failure{Node: NodeRef{Rank: -1, Host: s.e.cfg.Endpoint}, WorkerRank: -1, Lost: true, Store: true, At: time.Now(), Reason: err.Error()})
	s.notify()
}

func (s *etcdSession) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *etcdSession) push(f Failure) {
	select {
	case s.fails <- f:
	default:
		s.log.Error("rendezvous failure dropped: the Failures channel is full", zap.Stringer("failure", f))
	}
}

// apply folds one key change into the local copy; called with s.mu held, in revision order.
func (s *etcdSession) apply(put bool, key string, val []byte, rev int64) {
	if key == s.job.closedKey() {
		if put && s.closed == nil {
			s.closed = s.job.closedErr(val)
		}
		return
	}
	rel := strings.TrimPrefix(key, s.dir)
	kind, name, _ := strings.Cut(rel, "/")
	switch kind {
	case "members":
		s.member(put, key, name, val, rev)
	case "world":
		if put && s.asg == nil && s.worldErr == nil {
			s.settle(val)
		}
	case "left":
		if put {
			s.left[name] = true
		}
	case "failures":
		if put {
			s.failed(key, val)
		}
	case "barriers", "data":
		s.keyed(put, key, rel, val)
	}
}

// member records a member's registration (the revision of its first one counts), or its disappearance. With
// s.mu held.
func (s *etcdSession) member(put bool, key, inst string, val []byte, rev int64) {
	if !put {
		old, ok := s.members[inst]
		delete(s.members, inst)
		if ok {
			s.lostMember(inst, old.m)
		}
		return
	}
	var r etcdRegistration
	if err := json.Unmarshal(val, &r); err != nil {
		s.log.Warn("ignoring a malformed etcd member", zap.String("key", key), zap.Error(err))
		return
	}
	if old, ok := s.members[inst]; ok {
		rev = old.rev
	}
	em := etcdMember{m: r.Member, nnodes: r.NNodes, min: r.MinNodes, rev: rev}
	s.members[inst] = em
	if _, ok := s.seen[inst]; !ok {
		s.seen[inst] = em
	}
}

// failed passes another node's failure on. With s.mu held.
func (s *etcdSession) failed(key string, val []byte) {
	var f Failure
	if err := json.Unmarshal(val, &f); err != nil {
		s.log.Warn("ignoring a malformed etcd failure", zap.String("key", key), zap.Error(err))
		return
	}
	if f.Node.Instance != s.self.Instance {
		s.push(f)
	}
}

// keyed records a barrier or data key of a rank (rel: "barriers/<name>/<rank>", "data/<key>/<rank>"). With
// s.mu held.
func (s *etcdSession) keyed(put bool, key, rel string, val []byte) {
	i := strings.LastIndexByte(rel, '/')
	r, err := strconv.Atoi(rel[i+1:])
	if err != nil || r < 0 || r >= s.n {
		s.log.Warn("ignoring a foreign etcd key", zap.String("key", key))
		return
	}
	group := s.keys[rel[:i]]
	if group == nil {
		group = map[int][]byte{}
		s.keys[rel[:i]] = group
	}
	if put {
		group[r] = val
	} else {
		delete(group, r)
	}
}

// lostMember records that a member of the world (which did not leave) is gone.
func (s *etcdSession) lostMember(inst string, m Member) {
	r, in := s.byInst[inst]
	if !in || s.left[inst] {
		return
	}
	f := Failure{Node: m.ref(r), WorkerRank: -1, Lost: true, At: time.Now(),
		Reason: fmt.Sprintf("its etcd lease expired or was revoked (launcher killed or host down; lease TTL %ds)", s.e.ttl)}
	s.lost = append(s.lost, f)
	if inst != s.self.Instance {
		s.push(f)
	}
}

// settle computes the agreed world from the world key, as every node does; with s.mu held. A member of the world
// already gone (its lease expired before the key was written) is lost at once.
func (s *etcdSession) settle(val []byte) {
	var w etcdWorld
	if err := json.Unmarshal(val, &w); err != nil || len(w.Members) == 0 {
		s.worldErr = newError(ErrProtocol, fmt.Sprintf("etcd key %sworld holds %q, not a world", s.dir, val))
		return
	}
	if err := w.sameSize(s.self.Generation, s.e.cfg, s.self.ref(s.self.Rank)); err != nil {
		s.worldErr = err
		return
	}
	members := make([]Member, len(w.Members))
	in := false
	for i, inst := range w.Members {
		em, ok := s.seen[inst]
		if !ok {
			s.worldErr = newError(ErrProtocol, fmt.Sprintf("etcd key %sworld names instance %s, which never registered", s.dir, inst))
			return
		}
		members[i] = em.m
		in = in || inst == s.self.Instance
	}
	if !in {
		s.worldErr = newError(ErrWorldFull, fmt.Sprintf("generation %d closed with %d nodes without this one", s.self.Generation, len(w.Members)), s.self.ref(-1))
		return
	}
	ranks, err := assignRanks(members, len(members))
	if err == nil {
		err = agree(members, ranks, s.self.Generation)
	}
	if err != nil {
		s.worldErr = err
		return
	}
	asg := buildAssignment(members, ranks)
	s.n = len(members)
	s.byInst = map[string]int{}
	for i, m := range members {
		s.byInst[m.Instance] = ranks[i]
		if m.Instance == s.self.Instance {
			asg.NodeRank = ranks[i]
			s.rank = ranks[i]
		}
	}
	s.asg = asg
	for _, m := range members {
		if _, live := s.members[m.Instance]; !live {
			s.lostMember(m.Instance, m)
		}
	}
}

// live is the live registrations in registration order; with s.mu held.
func (s *etcdSession) live() []etcdMember {
	out := make([]etcdMember, 0, len(s.members))
	for _, m := range s.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rev < out[j].rev })
	return out
}

// propose writes the world key (the first proposal wins; the others find it written).
func (s *etcdSession) propose(ctx context.Context, members []etcdMember) error {
	w := etcdWorld{NNodes: s.max, MinNodes: s.e.cfg.MinNodes}
	for _, m := range members {
		w.Members, w.Hosts = append(w.Members, m.m.Instance), append(w.Hosts, m.m.Host)
	}
	b, _ := json.Marshal(w)
	key := s.dir + "world"
	ctx, cancel := s.h.bind(ctx)
	defer cancel()
	if _, err := s.e.txn(ctx, "agree on the world", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b), clientv3.WithLease(s.job.lease)))
	}); err != nil {
		return s.opErr("agree on the world", err)
	}
	return nil
}

// await waits for the world key, proposing it when max nodes are registered, or when min are and the last call
// is over; every node computes the same world from it. It ends at once when the nodes disagree on the world's
// size, the job closes or etcd is lost.
func (s *etcdSession) await(ctx context.Context) (*Assignment, error) {
	start := time.Now()
	var lc lastCall
	defer lc.stop()
	proposed := false
	for {
		asg, live, ch, err := s.joinState()
		if asg != nil || err != nil {
			return asg, err
		}
		if len(live) >= s.max && !proposed {
			proposed = true
			if err := s.propose(ctx, live[:s.max]); err != nil {
				return nil, err
			}
		}
		lc.track(ctx, len(live) >= s.min && len(live) < s.max, s.lastCall)
		select {
		case <-ch:
		case <-lc.c:
			lc.stop()
			if len(live) >= s.min {
				s.log.Info("rendezvous last call over", zap.Int("nodes", len(live)))
				if err := s.propose(ctx, live[:min(len(live), s.max)]); err != nil {
					return nil, err
				}
			}
		case <-ctx.Done():
			return nil, s.joinTimedOut(ctx, start)
		}
	}
}

// joinState is where the join stands: the agreed world, or why there is none for this node (the nodes disagree,
// the job closed, etcd is lost), else the live registrations and the channel that says when that changes.
func (s *etcdSession) joinState() (*Assignment, []etcdMember, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.asg != nil:
		return s.asg, nil, nil, nil
	case s.worldErr != nil:
		return nil, nil, nil, s.worldErr
	case s.closed != nil:
		return nil, nil, nil, s.closed
	}
	if err := s.h.failed(); err != nil {
		return nil, nil, nil, err
	}
	if err := s.sizeMismatch(); err != nil {
		return nil, nil, nil, err
	}
	return nil, s.live(), s.changed, nil
}

// sizeMismatch is the *MismatchError of a generation in which registrations ask for different size ranges, nil
// when all ask for this node's. Every node sees the same registrations, in the same order: all fail alike. With
// s.mu held.
func (s *etcdSession) sizeMismatch() error {
	var seen []etcdMember
	odd := false
	for _, m := range s.seen {
		seen = append(seen, m)
		odd = odd || m.nnodes != s.max || m.min != s.e.cfg.MinNodes
	}
	if !odd {
		return nil
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i].rev < seen[j].rev })
	vals := make([]string, len(seen))
	refs := make([]NodeRef, len(seen))
	for i, m := range seen {
		vals[i], refs[i] = sizeRange(m.min, m.nnodes), m.m.ref(m.m.Rank)
	}
	return disagreement(FieldNodes, s.self.Generation, vals, refs)
}

// joinTimedOut is the error of a join whose context ended: ErrMissingNodes naming who never arrived when its
// deadline passed (every registration seen counts as arrived: the others may have given up and gone just before
// this node).
func (s *etcdSession) joinTimedOut(ctx context.Context, start time.Time) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	w := &world{gen: s.self.Generation, nnodes: s.max, min: s.min}
	s.mu.Lock()
	for _, m := range s.seen {
		w.entries = append(w.entries, &entry{m: m.m})
	}
	s.mu.Unlock()
	sort.Slice(w.entries, func(i, j int) bool { return w.entries[i].m.Host < w.entries[j].m.Host })
	return w.missing(time.Since(start))
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

// watch folds the events of key (with opts) into the local copy, from revision rev on. A watch that etcd cancels
// because its member has no leader for the moment (WithRequireLeader) is resumed after the last revision applied;
// any other end while the session is open (a compaction, a broken stream) means etcd is lost.
func (s *etcdSession) watch(ctx context.Context, rev int64, what, key string, opts ...clientv3.OpOption) {
	defer s.wg.Done()
	for {
		next, err := s.follow(ctx, rev, key, opts...)
		if err == nil || !transient(err) || ctx.Err() != nil {
			if err == nil {
				err = errors.New("the watch ended")
			}
			s.lose(s.e.lost(fmt.Sprintf("the watch of %s failed: %v", what, err)))
			return
		}
		s.log.Info("etcd watch cancelled for a leader election; resuming", zap.String("watch", what), zap.Int64("revision", next), zap.Error(err))
		rev = next
	}
}

// follow applies the watch's events from revision rev until the watch ends; it returns the revision to resume
// from and why it ended (nil: the watch channel closed).
func (s *etcdSession) follow(ctx context.Context, rev int64, key string, opts ...clientv3.OpOption) (int64, error) {
	wch := s.e.cli.Watch(clientv3.WithRequireLeader(ctx), key, append(opts, clientv3.WithRev(rev))...)
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return rev, err
		}
		s.mu.Lock()
		for _, ev := range resp.Events {
			s.apply(ev.Type == clientv3.EventTypePut, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.CreateRevision)
			rev = max(rev, ev.Kv.ModRevision+1)
		}
		s.notify()
		s.mu.Unlock()
	}
	return rev, nil
}

// keepalive keeps this node's lease alive; when it cannot (etcdlease.go), etcd is lost.
func (s *etcdSession) keepalive(ctx context.Context) {
	defer s.wg.Done()
	if err := s.e.keepAlive(ctx, s.lease, time.Duration(s.e.ttl)*time.Second, true, s.log); err != nil {
		s.lose(s.e.lost(fmt.Sprintf("this node's lease %x could not be kept alive: %v", int64(s.lease), err)))
	}
}

// wait re-runs check (under s.mu) on every change until it returns true, ctx ends or etcd is lost.
func (s *etcdSession) wait(ctx context.Context, check func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := check(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		if err := s.h.failed(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-s.h.ctx.Done():
		case <-ctx.Done():
			if err := s.h.failed(); err != nil {
				return err // ctx is bound to the link (s.ctx): its end is the reason
			}
			return ctx.Err()
		}
	}
}

// opErr is the error of an etcd call that failed: the reason etcd is lost, when it is.
func (s *etcdSession) opErr(what string, err error) error {
	if herr := s.h.failed(); herr != nil {
		return herr
	}
	return s.e.unreachable(what, err)
}

// ctx bounds a call of the session: by ctx's deadline, else the join timeout; and by the link to etcd.
func (s *etcdSession) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.e.cfg.Timeout)
		bound, unbind := s.h.bind(ctx)
		return bound, func() { unbind(); cancel() }
	}
	return s.h.bind(ctx)
}

// collect waits until every rank has key kind/name/<rank>; a lost node without it fails the wait.
func (s *etcdSession) collect(ctx context.Context, kind, name string) (map[int][]byte, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var lerr error
	err := s.wait(ctx, func() bool {
		present := s.keys[kind+"/"+name]
		for _, f := range s.lost {
			if _, ok := present[f.Node.Rank]; !ok {
				lerr = &NodeLostError{Node: f.Node, Generation: s.self.Generation, Detail: fmt.Sprintf("%s %q cannot complete without it", strings.TrimSuffix(kind, "s"), name)}
				return true
			}
		}
		return len(present) == s.n
	})
	if lerr != nil {
		return nil, lerr
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			s.mu.Lock()
			present := s.keys[kind+"/"+name]
			var late []NodeRef
			for inst, r := range s.byInst {
				if _, ok := present[r]; !ok {
					ref := NodeRef{Rank: r, Instance: inst}
					if m, ok := s.seen[inst]; ok {
						ref.Host = m.m.Host
					}
					late = append(late, ref)
				}
			}
			s.mu.Unlock()
			sort.Slice(late, func(i, j int) bool { return late[i].Rank < late[j].Rank })
			return nil, newError(ErrTimeout, fmt.Sprintf("%s %q: these nodes did not arrive in time", kind, name), late...)
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int][]byte{}
	for r, v := range s.keys[kind+"/"+name] {
		out[r] = v
	}
	return out, nil
}

// put writes key of the generation, tied to this node's lease, or (lease false) to the job's: such keys outlive
// the node, not the job.
func (s *etcdSession) put(ctx context.Context, key string, val []byte, lease bool) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	l := s.job.lease // the job's keys live as long as the job
	if lease {
		l = s.lease
	}
	if err := s.e.put(ctx, s.dir+key, string(val), clientv3.WithLease(l)); err != nil {
		return s.opErr("put "+key, err)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return newError(ErrConfig, fmt.Sprintf("name %q: must be non-empty without '/'", name))
	}
	return nil
}

func (s *etcdSession) Barrier(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.put(ctx, fmt.Sprintf("barriers/%s/%d", name, s.rank), []byte{1}, true); err != nil {
		return err
	}
	_, err := s.collect(ctx, "barriers", name)
	return err
}

// publish stores data on the job's lease: results must outlive the node that published them.
func (s *etcdSession) Publish(ctx context.Context, key string, data []byte) error {
	if err := checkName(key); err != nil {
		return err
	}
	return s.put(ctx, fmt.Sprintf("data/%s/%d", key, s.rank), data, false)
}

func (s *etcdSession) Gather(ctx context.Context, key string) (map[int][]byte, error) {
	if err := checkName(key); err != nil {
		return nil, err
	}
	return s.collect(ctx, "data", key)
}

func (s *etcdSession) Fail(ctx context.Context, f Failure) error {
	f = f.stamped()
	f.Node = s.self.ref(s.rank)
	f.Lost = false
	b, _ := json.Marshal(f)
	return s.put(ctx, fmt.Sprintf("failures/%d", s.rank), b, false)
}

func (s *etcdSession) Leave(ctx context.Context) error {
	return s.put(ctx, "left/"+s.self.Instance, []byte{1}, false)
}

// waiting counts the nodes registered in the next generation while its world is not agreed yet.
func (s *etcdSession) Waiting(ctx context.Context) (int, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	next := s.job.genDir(s.self.Generation + 1)
	resp, err := s.e.txn(ctx, "count the nodes waiting", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(next+"world"), "=", 0)).
			Then(clientv3.OpGet(next+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly()))
	})
	if err != nil {
		return 0, s.opErr("count the nodes waiting", err)
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return int(resp.Responses[0].GetResponseRange().Count), nil
}

// finish writes the job's closed record once, on the job's lease: the first node to write it wins.
func (s *etcdSession) Finish(ctx context.Context, code int) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, _ := json.Marshal(etcdClosed{Generation: s.self.Generation, ExitCode: code})
	key := s.job.closedKey()
	if _, err := s.e.txn(ctx, "close the job", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b), clientv3.WithLease(s.job.lease)))
	}); err != nil {
		return s.opErr("close the job", err)
	}
	s.log.Info("rendezvous: job closed", zap.String("run_id", s.self.RunID), zap.Int("generation", s.self.Generation), zap.Int("exit_code", code))
	return nil
}

// Assignment is the agreed world: await saw it before the join returned.
func (s *etcdSession) Assignment() *Assignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asg.clone()
}

func (s *etcdSession) Failures() <-chan Failure { return s.fails }

func (s *etcdSession) Done() <-chan struct{} { return s.h.ctx.Done() }

func (s *etcdSession) Err() error { return s.h.failed() }

// close revokes this node's lease (unless etcd is lost: nobody to tell) and stops the watches.
func (s *etcdSession) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	lost := s.h.failed()
	s.h.end(newError(ErrClosed, "session closed"))
	s.mu.Unlock()
	var err error
	if lost == nil {
		err = s.e.revoke(s.lease)
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	close(s.fails)
	if err != nil {
		return s.e.unreachable("revoke the lease", err)
	}
	return nil
}
