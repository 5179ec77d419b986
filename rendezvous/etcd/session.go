package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// etcdSession is one generation on etcd: a lease tying this node's keys to its liveness, and watches: all/, what
// every node must hear (the world, completed barriers and gathers, failures, the job's close); while the world
// forms, one registration key (or members/, on the node that counts them: startCounting); once it is agreed,
// members/ for deletions only (lost nodes). No node hears the others' registrations, barrier arrivals or data.
type etcdSession struct {
	e       *etcdStore
	job     *etcdJob
	log     *zap.Logger
	dir     string
	lease   clientv3.LeaseID
	forming atomic.Bool // the join is under way: etcd busy with it is waited for (keepAlive)
	// worldRead is the bytes of the world this node read to settle it (the head and its share): its share's
	// size, not the world's.
	worldRead atomic.Int64
	self      rendezvous.Member
	reg       etcdRegistration
	min, max  int                // the world's size range
	lastCall  time.Duration      // how long an elastic join waits past min
	cancel    context.CancelFunc // stops the watches
	unkeep    context.CancelFunc // stops keeping the lease alive
	wctx      context.Context    // the watches' context: ends with the session or the link to etcd
	h         *health            // the link to etcd: this session's lease and watches, and the job's lease

	mu       sync.Mutex
	changed  chan struct{}
	rank     int
	n        int                    // the world's size once agreed (max before)
	world    []byte                 // the world key's value, once read and until settled
	asg      *rendezvous.Assignment // the agreed world, once settled
	worldErr error                  // or why it cannot be this node's
	agreed   *etcdWorld             // the agreed world's head, once settled
	nodes    []rendezvous.Member    // the world's registrations, in registration order (read: not changed), once needed (needNodes)
	ranks    []int                  // and their ranks
	pending  []string               // the instances lost before they were read
	loading  bool                   // they are being read
	byInst   map[string]int         // the index of each instance in nodes, once a node is lost
	first    bool                   // this node holds the first registration key: it counts the registrations
	tally    *etcdTally             // the registrations, while this node counts them
	untally  context.CancelFunc     // stops the watch of the registrations
	ahead    string                 // the registration this node watches while the world forms, unless it counts
	aheadRev int64                  // from this revision
	unahead  context.CancelFunc     // stops that watch; nil while it is not open
	recheck  bool                   // the registration ahead vanished: which is first now?
	lost     []rendezvous.Failure
	lostInst map[string]bool
	done     map[string]bool // completed barriers and gathers: "barriers/<name>", "data/<key>"
	closed   error           // the job closed (*JobClosedError)
	closing  bool
	fails    chan rendezvous.Failure
	wg       sync.WaitGroup
}

func newEtcdSession(e *etcdStore, j *etcdJob, log *zap.Logger, dir string, m rendezvous.Member) *etcdSession {
	return &etcdSession{e: e, job: j, log: log, dir: dir, self: m, rank: -1, min: e.cfg.MinNodes, max: e.cfg.NNodes, n: e.cfg.NNodes,
		reg: etcdRegistration{Member: m, NNodes: e.cfg.NNodes, MinNodes: e.cfg.MinNodes}, lastCall: e.cfg.LastCall, changed: make(chan struct{}),
		lostInst: map[string]bool{}, done: map[string]bool{}, fails: make(chan rendezvous.Failure, 1024), h: newHealth()}
}

// keep keeps the session's lease alive until the session closes: when it cannot, etcd is lost.
func (s *etcdSession) keep(ctx context.Context, lease clientv3.LeaseID) {
	s.lease = lease
	s.unkeep = s.e.keep(ctx, &s.wg, lease, s.e.ttl, func() bool { return !s.forming.Load() }, "this node's", s.log, s.lose)
}

// register claims the node's host name and requested rank and writes its registration, all tied to its lease
// (and a record that it arrived, arrived/<instance>, tied to the job's: a join that times out names who never
// did), and reads in the same transaction whether it holds the first registration key (then it counts them),
// the world and the job's state. The claims are made in that transaction when they are free; otherwise (taken,
// or this node's own from an earlier join) first by claim.
func (s *etcdSession) register(jctx context.Context) error {
	bctx, bcancel := s.h.bind(jctx)
	defer bcancel()
	members := s.dir + "members/"
	body, _ := json.Marshal(s.reg)
	lease := clientv3.WithLease(s.lease)
	ops := []clientv3.Op{clientv3.OpPut(members+s.self.Instance, string(body), lease),
		clientv3.OpGet(members, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.dir+"all/", clientv3.WithPrefix()), clientv3.OpGet(s.job.closedKey()),
		clientv3.OpPut(s.dir+"arrived/"+s.self.Instance, string(body), clientv3.WithLease(s.job.lease))}
	var free []clientv3.Cmp
	var claims []clientv3.Op
	for _, k := range claimKeys(s.dir, s.self) {
		free = append(free, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		claims = append(claims, clientv3.OpPut(k, s.self.Instance, lease))
	}
	r, err := s.e.txn(bctx, "register", func(t clientv3.Txn) clientv3.Txn { return t.If(free...).Then(append(claims, ops...)...) })
	if err == nil && !r.Succeeded {
		if err := s.e.claim(bctx, s.dir, s.self, s.lease); err != nil {
			return err
		}
		claims = nil
		r, err = s.e.txn(bctx, "register", func(t clientv3.Txn) clientv3.Txn { return t.Then(ops...) })
	}
	if err != nil {
		return s.opErr("register", err)
	}
	resps := r.Responses[len(claims):]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aheadOf(resps[1].GetResponseRange().Kvs, r.Header.Revision)
	for _, resp := range resps[2:4] { // all/ and the closed record
		for _, kv := range resp.GetResponseRange().Kvs {
			s.apply(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
		}
	}
	s.notify()
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
	s.push(rendezvous.Failure{Node: rendezvous.NodeRef{Rank: -1, Host: s.e.cfg.Endpoint}, WorkerRank: -1, Lost: true, Store: true, At: time.Now(), Reason: err.Error()})
	s.notify()
}

func (s *etcdSession) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *etcdSession) push(f rendezvous.Failure) {
	select {
	case s.fails <- f:
	default:
		s.log.Error("rendezvous failure dropped: the Failures channel is full", zap.Stringer("failure", f))
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
		return agree.NewError(rendezvous.ErrConfig, fmt.Sprintf("name %q: must be non-empty without '/'", name))
	}
	return nil
}

func (s *etcdSession) Fail(ctx context.Context, f rendezvous.Failure) error {
	f = f.Stamped()
	f.Node = s.self.Ref(s.rank)
	f.Lost = false
	b, _ := json.Marshal(f)
	return s.put(ctx, fmt.Sprintf("all/failures/%d", s.rank), b, false)
}

// Leave ties this node's registration to the job's lease: its node's lease then ends without the registration
// vanishing, and nobody hears a departure (a thousand nodes leaving cost no node anything).
func (s *etcdSession) Leave(ctx context.Context) error {
	r := s.reg
	r.Left = true
	b, _ := json.Marshal(r)
	return s.put(ctx, "members/"+s.self.Instance, b, false)
}

// Waiting counts the nodes registered in the next generation while its world is not agreed yet.
func (s *etcdSession) Waiting(ctx context.Context) (int, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	next := s.job.genDir(s.self.Generation + 1)
	resp, err := s.e.txn(ctx, "count the nodes waiting", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(next+"all/world"), "=", 0)).
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

// Finish writes the job's closed record once, on the job's lease: the first node to write it wins. The nodes
// waiting for the world to restart (in the next generation) hear of it through its copy there, all/closed; a
// node that opens a generation later reads the record itself (openGen).
func (s *etcdSession) Finish(ctx context.Context, code int) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, _ := json.Marshal(etcdClosed{Generation: s.self.Generation, ExitCode: code})
	key := s.job.closedKey()
	jl := clientv3.WithLease(s.job.lease)
	if _, err := s.e.txn(ctx, "close the job", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(b), jl), clientv3.OpPut(s.job.genDir(s.self.Generation+1)+"all/closed", string(b), jl))
	}); err != nil {
		return s.opErr("close the job", err)
	}
	s.log.Info("rendezvous: job closed", zap.String("run_id", s.self.RunID), zap.Int("generation", s.self.Generation), zap.Int("exit_code", code))
	return nil
}

// Assignment is the agreed world: await saw it before the join returned.
func (s *etcdSession) Assignment() *rendezvous.Assignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asg.Clone()
}

func (s *etcdSession) Failures() <-chan rendezvous.Failure { return s.fails }

func (s *etcdSession) Done() <-chan struct{} { return s.h.ctx.Done() }

func (s *etcdSession) Err() error { return s.h.failed() }

// Close revokes this node's lease (unless etcd is lost: nobody to tell) and stops the watches.
func (s *etcdSession) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	lost := s.h.failed()
	s.h.end(agree.NewError(rendezvous.ErrClosed, "session closed"))
	s.mu.Unlock()
	var err error
	if lost == nil && s.lease != 0 {
		err = s.e.revoke(s.lease)
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.unkeep != nil {
		s.unkeep()
	}
	s.wg.Wait()
	close(s.fails)
	if err != nil {
		return s.e.unreachable("revoke the lease", err)
	}
	return nil
}
