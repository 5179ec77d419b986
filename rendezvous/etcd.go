package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdBackend is the etcd v3 client of one Rendezvous. Keys live under <prefix><run id>/<generation>/ (see doc.go).
type etcdBackend struct {
	cli    *clientv3.Client
	cfg    *Config
	log    *zap.Logger
	prefix string
	ttl    int64
}

func newEtcd(ctx context.Context, cfg *Config, log *zap.Logger) (*etcdBackend, error) {
	if cfg.Endpoint == "" {
		return nil, newError(ErrConfig, "etcd rendezvous needs --rdzv-endpoint host:2379[,host:2379...]")
	}
	if cfg.NNodes < 1 {
		return nil, newError(ErrConfig, "etcd rendezvous needs --nnodes")
	}
	var eps []string
	for _, e := range strings.Split(cfg.Endpoint, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, newError(ErrConfig, fmt.Sprintf("--rdzv-endpoint %q has an empty entry", cfg.Endpoint))
		}
		eps = append(eps, e)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: log.Named("etcd"),
		DialKeepAliveTime: cfg.Heartbeat, DialKeepAliveTimeout: cfg.Heartbeat, Context: context.WithoutCancel(ctx)})
	if err != nil {
		return nil, fmt.Errorf("rendezvous: etcd client for %s: %w", cfg.Endpoint, err)
	}
	prefix := cfg.Conf["prefix"]
	if prefix == "" {
		prefix = "/tpurun/rdzv/"
	}
	return &etcdBackend{cli: cli, cfg: cfg, log: log, prefix: prefix, ttl: max(int64(math.Ceil(cfg.Heartbeat.Seconds())), 1)}, nil
}

func (e *etcdBackend) close() error { return e.cli.Close() }

// etcdSession is one generation on etcd: a lease tying this node's keys to its liveness, and a watch on the
// generation's keys that keeps a local copy of the world.
type etcdSession struct {
	e      *etcdBackend
	log    *zap.Logger
	dir    string
	lease  clientv3.LeaseID
	self   Member
	rank   int
	n      int
	cancel context.CancelFunc

	mu       sync.Mutex
	changed  chan struct{}
	members  map[string]etcdMember // by instance
	seen     map[string]etcdMember // every member that ever registered in this generation: the world is its first n
	left     map[string]bool
	keys     map[string]map[int][]byte // barrier and data keys: "barriers/<name>" or "data/<key>" -> rank -> value
	byInst   map[string]int            // rank of each instance once assigned
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

func (e *etcdBackend) join(ctx context.Context, m Member, log *zap.Logger) (backend, *Assignment, error) {
	deadline := time.Now().Add(e.cfg.Timeout)
	jctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	dir := fmt.Sprintf("%s%s/%d/", e.prefix, m.RunID, m.Generation)
	lg, err := e.cli.Grant(jctx, e.ttl)
	if err != nil {
		return nil, nil, e.unreachable("grant a lease", err)
	}
	body, _ := json.Marshal(m)
	opt := clientv3.WithLease(lg.ID)
	// the generation's first key marks its start: every node replays the generation's history from there, so all
	// see the same registrations in the same order even if some are gone again
	open := dir + "open"
	oresp, err := e.cli.Txn(jctx).If(clientv3.Compare(clientv3.CreateRevision(open), "=", 0)).
		Then(clientv3.OpPut(open, "1")).Else(clientv3.OpGet(open)).Commit()
	if err != nil {
		e.cli.Revoke(context.WithoutCancel(ctx), lg.ID)
		return nil, nil, e.unreachable("open generation", err)
	}
	startRev := oresp.Header.Revision
	if !oresp.Succeeded {
		startRev = oresp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	// claim the host name and the requested rank by transactions: create, or find our own instance there
	claims := []string{}
	if m.Host != "" {
		claims = append(claims, dir+"hosts/"+m.Host)
	}
	if m.Rank >= 0 {
		claims = append(claims, dir+"ranks/"+strconv.Itoa(m.Rank))
	}
	for _, k := range claims {
		resp, err := e.cli.Txn(jctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, m.Instance, opt)).Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			e.cli.Revoke(context.WithoutCancel(ctx), lg.ID)
			return nil, nil, e.unreachable("claim "+k, err)
		}
		if resp.Succeeded {
			continue
		}
		other := string(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		if other == m.Instance {
			if _, err := e.cli.Put(jctx, k, m.Instance, opt); err != nil {
				return nil, nil, e.unreachable("claim "+k, err)
			}
			continue
		}
		e.cli.Revoke(context.WithoutCancel(ctx), lg.ID)
		ref := NodeRef{Rank: -1, Instance: other}
		if g, err := e.cli.Get(jctx, dir+"members/"+other); err == nil && len(g.Kvs) == 1 {
			var om Member
			if json.Unmarshal(g.Kvs[0].Value, &om) == nil {
				ref = om.ref(om.Rank)
			}
		}
		what := "host"
		if strings.Contains(k, "/ranks/") {
			what = "node rank"
		}
		return nil, nil, newError(ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node (etcd key %s); each node must have its own host name and node rank", m.Generation, what, k),
			m.ref(m.Rank), ref)
	}
	s := &etcdSession{e: e, log: log, dir: dir, lease: lg.ID, self: m, rank: -1, n: e.cfg.NNodes, changed: make(chan struct{}),
		members: map[string]etcdMember{}, seen: map[string]etcdMember{}, left: map[string]bool{}, keys: map[string]map[int][]byte{}, fails: make(chan Failure, 1024)}
	if _, err := e.cli.Put(jctx, dir+"members/"+m.Instance, string(body), opt); err != nil {
		e.cli.Revoke(context.WithoutCancel(ctx), lg.ID)
		return nil, nil, e.unreachable("register", err)
	}
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = wcancel
	ka, err := e.cli.KeepAlive(wctx, lg.ID)
	if err != nil {
		wcancel()
		e.cli.Revoke(context.WithoutCancel(ctx), lg.ID)
		return nil, nil, e.unreachable("keep the lease alive", err)
	}
	wch := e.cli.Watch(clientv3.WithRequireLeader(wctx), dir, clientv3.WithPrefix(), clientv3.WithRev(startRev))
	s.wg.Add(2)
	go s.watch(wch)
	go s.keepalive(wctx, ka)
	asg, err := s.await(jctx)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	log.Info("rendezvous joined (etcd)", zap.Int("node_rank", asg.NodeRank))
	return s, asg, nil
}

func (e *etcdBackend) unreachable(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return newError(ErrTimeout, fmt.Sprintf("etcd at %s: %s: %v; check --rdzv-endpoint and that etcd is up", e.cfg.Endpoint, what, err))
	}
	return newError(ErrServerLost, fmt.Sprintf("etcd at %s: %s: %v; check --rdzv-endpoint and that etcd is up", e.cfg.Endpoint, what, err))
}

// apply folds one key change into the local copy; called with s.mu held, or before the watch starts.
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
		if !ok || s.left[name] || s.byInst == nil {
			return
		}
		r, in := s.byInst[name]
		if !in {
			return
		}
		f := Failure{Node: old.m.ref(r), WorkerRank: -1, Lost: true, At: time.Now(),
			Reason: fmt.Sprintf("its etcd lease expired or was revoked (launcher killed or host down; lease TTL %ds)", s.e.ttl)}
		s.lost = append(s.lost, f)
		if name != s.self.Instance {
			s.push(f)
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

func (s *etcdSession) watch(wch clientv3.WatchChan) {
	defer s.wg.Done()
	for resp := range wch {
		if err := resp.Err(); err != nil {
			s.mu.Lock()
			s.watchErr = err
			s.notify()
			s.mu.Unlock()
			break
		}
		s.mu.Lock()
		for _, ev := range resp.Events {
			s.apply(ev.Type == clientv3.EventTypePut, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.CreateRevision)
		}
		s.notify()
		s.mu.Unlock()
	}
	s.mu.Lock()
	if !s.closing {
		if s.watchErr == nil {
			s.watchErr = errors.New("watch ended")
		}
		s.push(Failure{Node: NodeRef{Rank: -1, Host: s.e.cfg.Endpoint}, WorkerRank: -1, Lost: true, At: time.Now(),
			Reason: fmt.Sprintf("the etcd watch at %s ended: %v", s.e.cfg.Endpoint, s.watchErr)})
		s.notify()
	}
	s.mu.Unlock()
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
		ttl, err := s.e.cli.TimeToLive(tctx, s.lease)
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
func (s *etcdSession) await(ctx context.Context) (*Assignment, error) {
	start := time.Now()
	var asg *Assignment
	var aerr error
	err := s.wait(ctx, func() bool {
		if len(s.seen) < s.n {
			return false
		}
		all := make([]etcdMember, 0, len(s.seen))
		for _, m := range s.seen {
			all = append(all, m)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].rev < all[j].rev })
		all = all[:s.n]
		members := make([]Member, s.n)
		in := false
		for i, m := range all {
			members[i] = m.m
			in = in || m.m.Instance == s.self.Instance
		}
		if !in {
			aerr = newError(ErrWorldFull, fmt.Sprintf("generation %d already has its %d nodes", s.self.Generation, s.n), s.self.ref(-1))
			return true
		}
		ranks, err := assignRanks(members, s.n)
		if err == nil {
			err = agree(members, ranks, s.n)
		}
		if err != nil {
			aerr = err
			return true
		}
		asg = buildAssignment(members, ranks)
		s.byInst = map[string]int{}
		for i, m := range members {
			s.byInst[m.Instance] = ranks[i]
			if m.Instance == s.self.Instance {
				asg.NodeRank = ranks[i]
				s.rank = ranks[i]
			}
		}
		return true
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			s.mu.Lock()
			w := &world{gen: s.self.Generation, nnodes: s.n}
			for _, m := range s.seen {
				w.entries = append(w.entries, &entry{m: m.m})
			}
			sort.Slice(w.entries, func(i, j int) bool { return w.entries[i].m.Host < w.entries[j].m.Host })
			s.mu.Unlock()
			return nil, w.missing(time.Since(start))
		}
		return nil, err
	}
	return asg, aerr
}

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
				lerr = newError(ErrNodeLost, fmt.Sprintf("%s %q cannot complete: the node is gone", strings.TrimSuffix(kind, "s"), name), f.Node)
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
	if _, err := s.e.cli.Put(ctx, s.dir+key, string(val), opts...); err != nil {
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
