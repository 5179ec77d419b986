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
	e        *etcdBackend
	log      *zap.Logger
	dir      string
	lease    clientv3.LeaseID
	self     Member
	min, max int           // the world's size range
	lastCall time.Duration // how long an elastic join waits past min
	cancel   context.CancelFunc

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
	closing  bool
	watchErr error
	fails    chan Failure
	wg       sync.WaitGroup
}

type etcdMember struct {
	m   Member
	rev int64
}

// etcdWorld is the value of the world key: the instances of the agreed world, in registration order.
type etcdWorld struct {
	Members []string `json:"members"`
}

func newEtcdSession(e *etcdBackend, log *zap.Logger, dir string, lease clientv3.LeaseID, m Member) *etcdSession {
	return &etcdSession{e: e, log: log, dir: dir, lease: lease, self: m, rank: -1, min: e.cfg.MinNodes, max: e.cfg.NNodes, n: e.cfg.NNodes,
		lastCall: e.cfg.LastCall, changed: make(chan struct{}), members: map[string]etcdMember{}, seen: map[string]etcdMember{},
		left: map[string]bool{}, keys: map[string]map[int][]byte{}, fails: make(chan Failure, 1024)}
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
	rel := strings.TrimPrefix(key, s.dir)
	kind, name, _ := strings.Cut(rel, "/")
	switch kind {
	case "members":
		if put {
			var m Member
			if err := json.Unmarshal(val, &m); err != nil {
				s.log.Warn("ignoring a malformed etcd member", zap.String("key", key), zap.Error(err))
				return
			}
			if old, ok := s.members[name]; ok {
				rev = old.rev
			}
			s.members[name] = etcdMember{m: m, rev: rev}
			if _, ok := s.seen[name]; !ok {
				s.seen[name] = etcdMember{m: m, rev: rev}
			}
			return
		}
		old, ok := s.members[name]
		delete(s.members, name)
		if ok {
			s.lostMember(name, old.m)
		}
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
			var f Failure
			if err := json.Unmarshal(val, &f); err != nil {
				s.log.Warn("ignoring a malformed etcd failure", zap.String("key", key), zap.Error(err))
				return
			}
			if f.Node.Instance != s.self.Instance {
				s.push(f)
			}
		}
	case "barriers", "data":
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
	if err := json.Unmarshal(val, &w); err != nil || len(w.Members) == 0 || len(w.Members) > s.max {
		s.worldErr = newError(ErrProtocol, fmt.Sprintf("etcd key %sworld holds %q, not a world of up to %d nodes", s.dir, val, s.max))
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
		err = agree(members, ranks, len(members))
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
	w := etcdWorld{}
	for _, m := range members {
		w.Members = append(w.Members, m.m.Instance)
	}
	b, _ := json.Marshal(w)
	key := s.dir + "world"
	err := s.e.retry(ctx, "close the generation", func(ctx context.Context) error {
		_, err := s.e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b))).Commit()
		return err
	})
	if err != nil {
		return s.e.unreachable("close the generation", err)
	}
	return nil
}

// await waits for the world key, proposing it when max nodes are registered, or when min are and the last call
// is over; every node computes the same world from it.
func (s *etcdSession) await(ctx context.Context) (*Assignment, error) {
	start := time.Now()
	var lastCall <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	proposed := false
	for {
		s.mu.Lock()
		asg, werr, ch, watchErr := s.asg, s.worldErr, s.changed, s.watchErr
		live := s.live()
		s.mu.Unlock()
		switch {
		case asg != nil:
			return asg, nil
		case werr != nil:
			return nil, werr
		case watchErr != nil:
			return nil, newError(ErrServerLost, fmt.Sprintf("etcd at %s: %v", s.e.cfg.Endpoint, watchErr))
		}
		switch n := len(live); {
		case n >= s.max && !proposed:
			proposed = true
			if err := s.propose(ctx, live[:s.max]); err != nil {
				return nil, err
			}
		case n >= s.min && n < s.max && timer == nil:
			wait := s.lastCall
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(dl)*9/10) // the join timeout ends the last call too
			}
			timer = time.NewTimer(wait)
			lastCall = timer.C
		case n < s.min && timer != nil:
			timer.Stop()
			timer, lastCall = nil, nil
		}
		select {
		case <-ch:
		case <-lastCall:
			timer, lastCall = nil, nil
			if len(live) >= s.min {
				s.log.Info("rendezvous last call over", zap.Int("nodes", len(live)))
				if err := s.propose(ctx, live[:min(len(live), s.max)]); err != nil {
					return nil, err
				}
			}
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			// who arrived: every registration seen (the others may have given up and gone just before this node)
			w := &world{gen: s.self.Generation, nnodes: s.max, min: s.min}
			s.mu.Lock()
			for _, m := range s.seen {
				w.entries = append(w.entries, &entry{m: m.m})
			}
			s.mu.Unlock()
			sort.Slice(w.entries, func(i, j int) bool { return w.entries[i].m.Host < w.entries[j].m.Host })
			return nil, w.missing(time.Since(start))
		}
	}
}

// watch keeps the local copy of the generation's keys, from revision rev on. A watch that etcd cancels because
// its member has no leader for the moment (WithRequireLeader) is resumed after the last revision applied; any
// other end of the watch ends the session's view of the world (watchErr).
func (s *etcdSession) watch(ctx context.Context, rev int64) {
	defer s.wg.Done()
	for {
		next, err := s.follow(ctx, rev)
		if err == nil || !transient(err) || ctx.Err() != nil {
			s.watchEnded(err)
			return
		}
		s.log.Info("etcd watch cancelled for a leader election; resuming", zap.Int64("revision", next), zap.Error(err))
		rev = next
	}
}

// follow applies the watch's events from revision rev until the watch ends; it returns the revision to resume
// from and why it ended (nil: the watch channel closed).
func (s *etcdSession) follow(ctx context.Context, rev int64) (int64, error) {
	wch := s.e.cli.Watch(clientv3.WithRequireLeader(ctx), s.dir, clientv3.WithPrefix(), clientv3.WithRev(rev))
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

// watchEnded records that the watch ended for err (nil: its channel closed), unless the session is closing.
func (s *etcdSession) watchEnded(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.watchErr = err
	}
	if !s.closing {
		if s.watchErr == nil {
			s.watchErr = errors.New("watch ended")
		}
		s.push(Failure{Node: NodeRef{Rank: -1, Host: s.e.cfg.Endpoint}, WorkerRank: -1, Lost: true, At: time.Now(),
			Reason: fmt.Sprintf("the etcd watch at %s ended: %v", s.e.cfg.Endpoint, s.watchErr)})
	}
	s.notify()
}

func (s *etcdSession) keepalive(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.wg.Done()
	for {
		for range ka {
		}
		if ctx.Err() != nil {
			return
		}
		// the client gave up on the stream (an etcd member went away mid-stream): if the lease still lives on
		// the cluster, keep it alive again through another member.
		tctx, cancel := context.WithTimeout(ctx, s.e.cfg.Heartbeat)
		var ttl *clientv3.LeaseTimeToLiveResponse
		err := s.e.retry(tctx, "read the lease's time to live", func(ctx context.Context) (err error) {
			ttl, err = s.e.cli.TimeToLive(ctx, s.lease)
			return err
		})
		cancel()
		if err == nil && ttl.TTL > 0 {
			if ka, err = s.e.cli.KeepAlive(ctx, s.lease); err == nil {
				s.log.Info("etcd lease keep-alive resumed", zap.Int64("ttl_left", ttl.TTL))
				continue
			}
		}
		break
	}
	s.mu.Lock()
	if !s.closing {
		s.watchErr = fmt.Errorf("this node's etcd lease %x expired or could not be kept alive (etcd at %s unreachable?)", int64(s.lease), s.e.cfg.Endpoint)
		s.push(Failure{Node: s.self.ref(s.rank), WorkerRank: -1, Lost: true, At: time.Now(), Reason: s.watchErr.Error()})
		s.notify()
	}
	s.mu.Unlock()
}

// wait re-runs check (under s.mu) on every change until it returns true or ctx ends.
func (s *etcdSession) wait(ctx context.Context, check func() bool) error {
	for {
		s.mu.Lock()
		ok, ch, werr := check(), s.changed, s.watchErr
		s.mu.Unlock()
		if ok {
			return nil
		}
		if werr != nil {
			return newError(ErrServerLost, fmt.Sprintf("etcd at %s: %v", s.e.cfg.Endpoint, werr))
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// await waits until nnodes members are registered and computes the world from them, as every node does.
func (s *etcdSession) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.e.cfg.Timeout)
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

func (s *etcdSession) put(ctx context.Context, key string, val []byte, lease bool) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if lease {
		opts = append(opts, clientv3.WithLease(s.lease))
	}
	if err := s.e.put(ctx, s.dir+key, string(val), opts...); err != nil {
		return s.e.unreachable("put "+key, err)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return newError(ErrConfig, fmt.Sprintf("name %q: must be non-empty without '/'", name))
	}
	return nil
}

func (s *etcdSession) barrier(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.put(ctx, fmt.Sprintf("barriers/%s/%d", name, s.rank), []byte{1}, true); err != nil {
		return err
	}
	_, err := s.collect(ctx, "barriers", name)
	return err
}

// publish stores data without a lease: results must outlive the node that published them.
func (s *etcdSession) publish(ctx context.Context, key string, data []byte) error {
	if err := checkName(key); err != nil {
		return err
	}
	return s.put(ctx, fmt.Sprintf("data/%s/%d", key, s.rank), data, false)
}

func (s *etcdSession) gather(ctx context.Context, key string) (map[int][]byte, error) {
	if err := checkName(key); err != nil {
		return nil, err
	}
	return s.collect(ctx, "data", key)
}

func (s *etcdSession) fail(ctx context.Context, f Failure) error {
	f.Node = s.self.ref(s.rank)
	f.Lost = false
	b, _ := json.Marshal(f)
	return s.put(ctx, fmt.Sprintf("failures/%d", s.rank), b, false)
}

func (s *etcdSession) leave(ctx context.Context) error {
	return s.put(ctx, "left/"+s.self.Instance, []byte{1}, false)
}

// waiting counts the nodes registered in the next generation while its world is not agreed yet.
func (s *etcdSession) waiting(ctx context.Context) (int, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	next := s.e.genDir(s.self.RunID, s.self.Generation+1)
	var resp *clientv3.TxnResponse
	err := s.e.retry(ctx, "count the nodes waiting", func(ctx context.Context) (err error) {
		resp, err = s.e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(next+"world"), "=", 0)).
			Then(clientv3.OpGet(next+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
		return err
	})
	if err != nil {
		return 0, s.e.unreachable("count the nodes waiting", err)
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return int(resp.Responses[0].GetResponseRange().Count), nil
}

func (s *etcdSession) failures() <-chan Failure { return s.fails }

func (s *etcdSession) close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.e.cli.Revoke(ctx, s.lease)
	s.cancel()
	s.wg.Wait()
	close(s.fails)
	if err != nil {
		return s.e.unreachable("revoke the lease", err)
	}
	return nil
}
