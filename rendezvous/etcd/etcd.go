package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/setting"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// Name is the backend's name (Config.Backend); torchrun's older etcd backend is etcd-v2.
const Name = "etcd"

// The backend registers itself when a program links the package.
var _ = rendezvous.Register(rendezvous.Registration{Name: Name, Aliases: []string{"etcd-v2"}, Backend: backend{}})

// backend is torchrun's etcd rendezvous: an elastic world met on a real etcd v3 cluster, without a leader.
type backend struct{}

func (backend) Solo() bool                         { return false }
func (backend) Elastic() bool                      { return true }
func (backend) NeedsHosts(*rendezvous.Config) bool { return false }
func (backend) NamesNodes(*rendezvous.Config) bool { return false }
func (backend) Port() int                          { return 2379 }
func (backend) HostsServer() bool                  { return false }

func (backend) Open(ctx context.Context, cfg *rendezvous.Config, log *zap.Logger, linger time.Duration) (rendezvous.Store, error) {
	e, err := newEtcd(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	e.jobTTL = ttlOf(max(linger, nodeTTL(cfg.Heartbeat)))
	return e, nil
}

// etcdStore is the etcd v3 client of one Rendezvous. The keys of one job live under <prefix><run id>/<job>/,
// where <job> names the job instance (see package rendezvous's doc).
type etcdStore struct {
	cli    *clientv3.Client
	cfg    *rendezvous.Config
	log    *zap.Logger
	prefix string
	ttl    int64       // the TTL of a node's lease, in seconds: two heartbeats (nodeTTL)
	jobTTL int64       // the TTL of the job's lease: how long the job outlives its last node (linger, a node's TTL at least)
	tls    *tls.Config // nil without TLS

	mu   sync.Mutex
	jobs map[string]*etcdJob // the job this node takes part in, by run id
}

func newEtcd(ctx context.Context, cfg *rendezvous.Config, log *zap.Logger) (*etcdStore, error) {
	if cfg.Endpoint == "" {
		return nil, agree.ConfigError(setting.RendezvousEndpoint, "", "etcd rendezvous needs an endpoint: host:2379[,host:2379...]")
	}
	if cfg.NNodes < 1 {
		return nil, agree.ConfigError(setting.RendezvousNodes, "0", "etcd rendezvous needs a node count")
	}
	var eps []string
	for _, e := range strings.Split(cfg.Endpoint, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, agree.ConfigError(setting.RendezvousEndpoint, cfg.Endpoint, "an empty entry")
		}
		hostPort := strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
		if _, _, err := agree.SplitEndpoint(setting.RendezvousEndpoint, hostPort, false); err != nil {
			return nil, err
		}
		eps = append(eps, e)
	}
	eps, tlsCfg, err := tlsEndpoints(cfg.Conf, eps)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: log.Named("etcd"), TLS: tlsCfg,
		DialKeepAliveTime: cfg.Heartbeat, DialKeepAliveTimeout: dialKeepAliveTimeout, Context: context.WithoutCancel(ctx)})
	if err != nil {
		return nil, fmt.Errorf("rendezvous: etcd client for %s: %w", cfg.Endpoint, err)
	}
	prefix := cfg.Conf["prefix"]
	if prefix == "" {
		prefix = "/tpurun/rdzv/"
	}
	return &etcdStore{cli: cli, cfg: cfg, log: log, prefix: prefix, tls: tlsCfg, ttl: ttlOf(nodeTTL(cfg.Heartbeat)), jobTTL: ttlOf(nodeTTL(cfg.Heartbeat)),
		jobs: map[string]*etcdJob{}}, nil
}

// nodeTTL is the TTL of a node's lease: the silence limit, rendezvous.SilentBeats heartbeats. Renewed every third
// of it (the client's stream, etcd's guidance: every heartbeat), the lease outlives a node, or an etcd, that is
// busy for two heartbeats (a loaded host, a GC pause, a thousand nodes joining at once), and a node really gone is
// reported lost about three heartbeats after its last renewal. The job's lease lives as long at least (linger when longer): an etcd stopped for a heartbeat expires
// on its return every lease whose TTL it outlasted, the job's as well as a node's.
func nodeTTL(heartbeat time.Duration) time.Duration { return rendezvous.SilenceLimit(heartbeat) }

// dialKeepAliveTimeout is how long the client waits for etcd to answer a ping of the connection (sent when it
// has been idle for a heartbeat, every 10 s at most often) before it drops the connection. Generous: a loaded
// etcd answers late, and a dropped connection fails every request and watch on it; an etcd that is gone is found
// by the lease keeper (etcdStore.keep).
const dialKeepAliveTimeout = 20 * time.Second

// ttlOf is a lease TTL in whole seconds, at least 1.
func ttlOf(d time.Duration) int64 { return max(int64(math.Ceil(d.Seconds())), 1) }

// Close lets go of the job (its lease expires jobTTL later, unless another node still keeps it alive) and of
// the client.
func (e *etcdStore) Close() error {
	e.mu.Lock()
	jobs := e.jobs
	e.jobs = map[string]*etcdJob{}
	e.mu.Unlock()
	for _, j := range jobs {
		j.stop()
	}
	return e.cli.Close()
}

// Endpoint is the etcd endpoints.
func (e *etcdStore) Endpoint() string { return e.cfg.Endpoint }

// Hosts is nil: etcd's nodes bring their own names.
func (e *etcdStore) Hosts() []string { return nil }

func padGen(g int) string { return fmt.Sprintf("%010d", g) }

func (e *etcdStore) unreachable(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("rendezvous: etcd at %s: %s: %w", e.cfg.Endpoint, what, context.Canceled)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if why := tlsTrouble(e.tls, e.cli.Endpoints(), min(e.cfg.Heartbeat, 2*time.Second)); why != "" {
			return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("etcd at %s: %s: %v: %s", e.cfg.Endpoint, what, err, why))
		}
		return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("etcd at %s: %s: %v; check the endpoint and that etcd is up", e.cfg.Endpoint, what, err))
	}
	return e.lost(fmt.Sprintf("%s: %v", what, err))
}

// revoke revokes a lease, waiting a second at most: it is tidiness (the lease expires by itself), and etcd may be
// gone while a stopping node must not wait for it.
func (e *etcdStore) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(e.cfg.Heartbeat, time.Second))
	defer cancel()
	_, err := e.cli.Revoke(ctx, id)
	return err
}

// lost is the ErrStoreLost error of this etcd.
func (e *etcdStore) lost(detail string) error {
	return agree.StoreLost(e.cfg.Endpoint, "etcd: "+detail+"; check that etcd is up and reachable from every node")
}

// Join enters m.Generation of the job open under m.RunID (a new one when none is), or with LatestGeneration the
// generation being formed: when the world closes without this node (it came too late), it goes on to the next
// one. A closed job is a *JobClosedError.
func (e *etcdStore) Join(ctx context.Context, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	jctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	for {
		j, err := e.enterJob(jctx, m.RunID)
		if err != nil {
			return nil, err
		}
		s, err := e.joinJob(ctx, jctx, j, m, log.With(zap.String("job", j.id)))
		switch {
		case errors.Is(err, errJobGone) && jctx.Err() == nil:
			log.Info("rendezvous: the job found had just ended (its last node let go); entering the one open now")
			e.leaveJob(j)
			continue
		case errors.Is(err, rendezvous.ErrJobClosed):
			e.leaveJob(j) // this node does not keep a closed job alive
		}
		return s, err
	}
}

// errJobGone: the job instance this node entered vanished before it opened a generation (its last node had let
// go just before): the node enters the instance open now.
var errJobGone = errors.New("rendezvous: the job instance vanished")

// joinJob enters m.Generation of job j (see join).
func (e *etcdStore) joinJob(ctx, jctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	latest := m.Generation == rendezvous.LatestGeneration
	for {
		if latest {
			g, err := e.openGeneration(jctx, j, m, log)
			if err != nil {
				return nil, err
			}
			m.Generation = g
		}
		s, err := e.joinGeneration(ctx, jctx, j, m, log)
		if latest && errors.Is(err, rendezvous.ErrWorldFull) && jctx.Err() == nil {
			log.Info("rendezvous generation closed before this node got in; joining the next", zap.Int("generation", m.Generation))
			continue
		}
		return s, err
	}
}

// openGeneration is the generation a LatestGeneration joiner enters: the latest one opened, or the next one when
// its world is already agreed (the node waits there for the world to restart). A node that asks for another size
// range than the running world's is refused at once.
func (e *etcdStore) openGeneration(ctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (int, error) {
	key := j.latestKey()
	resp, err := e.get(ctx, key)
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	g := 0
	if len(resp.Kvs) == 1 {
		if g, err = strconv.Atoi(string(resp.Kvs[0].Value)); err != nil || g < 0 {
			return 0, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not a generation", key, resp.Kvs[0].Value))
		}
	}
	dir := j.genDir(g)
	w, err := e.get(ctx, dir+"all/world")
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	if len(w.Kvs) == 0 {
		return g, nil
	}
	world, err := parseWorld(dir, w.Kvs[0].Value)
	switch {
	case err != nil:
		return 0, err
	case world.Error != nil:
		return g, nil // the generation failed: joining it says why
	case world.NNodes != e.cfg.NNodes || world.MinNodes != e.cfg.MinNodes:
		members, ranks, err := e.readWorld(ctx, dir, world)
		if err != nil {
			return 0, err
		}
		return 0, world.sameSize(g, e.cfg, members, ranks, m.Ref(m.Rank))
	}
	log.Info("rendezvous: a node waits for the world to restart", zap.Int("running_generation", g), zap.Int("waits_in_generation", g+1))
	return g + 1, nil
}

// joinGeneration registers this node in one generation and waits for its world. The generation's opening, the
// node's lease and its watches are asked for at once; then one transaction claims its host and rank and registers
// it (a node that claims them again, or finds them taken, goes the long way: claim).
func (e *etcdStore) joinGeneration(ctx, jctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	s := newEtcdSession(e, j, log, j.genDir(m.Generation), m)
	s.forming.Store(true) // until the world is agreed, within the join's timeout
	defer s.forming.Store(false)
	var wg sync.WaitGroup
	var lg *clientv3.LeaseGrantResponse
	var gerr, werr error
	wg.Go(func() {
		if lg, gerr = e.grant(jctx, e.ttl); gerr == nil {
			s.keep(ctx, lg.ID) // at once: the rest of the join may take a while on a loaded etcd
		}
	})
	wg.Go(func() { werr = s.watchAll(ctx, jctx) })
	open, err := e.openGen(jctx, j, m)
	wg.Wait()
	switch {
	case err != nil:
	case gerr != nil:
		err = e.unreachable("grant a lease", gerr)
	case werr != nil:
		err = werr
	case open.NNodes != e.cfg.NNodes || open.MinNodes != e.cfg.MinNodes:
		err = e.sizeMismatch(jctx, j, m, open)
	default:
		err = s.register(jctx)
	}
	var asg *rendezvous.Assignment
	if err == nil {
		asg, err = s.await(jctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	log.Info("rendezvous joined (etcd)", zap.Int("node_rank", asg.NodeRank), zap.Int("nnodes", asg.NNodes), zap.Int("generation", asg.Generation))
	return s, nil
}

// openGen opens generation m.Generation of job j, or finds it open, and returns what it was opened with: the size
// range its first node asked for. Opening a generation also raises the job's latest generation, which
// LatestGeneration joiners read. Both keys live on the job's lease. All in one transaction that holds only while
// the instance is open: a closed one is its *JobClosedError, a vanished one errJobGone. Every node but the first
// finds the generation open with a read (one transaction that writes nothing: no entry in etcd's log).
func (e *etcdStore) openGen(ctx context.Context, j *etcdJob, m rendezvous.Member) (etcdOpen, error) {
	g := m.Generation
	open, lk, closed := j.genDir(g)+"open", j.latestKey(), j.closedKey()
	r, err := e.txn(ctx, "read the generation", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(j.key), "=", j.rev), clientv3.Compare(clientv3.CreateRevision(closed), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(open), ">", 0), clientv3.Compare(clientv3.Value(lk), ">", padGen(g-1))).
			Then(clientv3.OpGet(open))
	})
	if err != nil {
		return etcdOpen{}, e.unreachable("read the generation", err)
	}
	if r.Succeeded {
		return parseOpen(open, r.Responses[0].GetResponseRange().Kvs[0].Value)
	}
	return e.openGenWrite(ctx, j, m)
}

// parseOpen reads the value of a generation's open key.
func parseOpen(key string, val []byte) (etcdOpen, error) {
	var got etcdOpen
	if err := json.Unmarshal(val, &got); err != nil || got.NNodes < 1 {
		return etcdOpen{}, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not how the generation was opened", key, val))
	}
	return got, nil
}

// openGenWrite is openGen's transaction that writes: it opens the generation (see openGen).
func (e *etcdStore) openGenWrite(ctx context.Context, j *etcdJob, m rendezvous.Member) (etcdOpen, error) {
	g := m.Generation
	open, lk, gv, closed := j.genDir(g)+"open", j.latestKey(), padGen(g), j.closedKey()
	mine := etcdOpen{NNodes: e.cfg.NNodes, MinNodes: e.cfg.MinNodes, By: m.Ref(m.Rank)}
	b, _ := json.Marshal(mine)
	jl := clientv3.WithLease(j.lease)
	bump := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}, []clientv3.Op{clientv3.OpPut(lk, gv, jl)},
		[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(lk), "<", gv)}, []clientv3.Op{clientv3.OpPut(lk, gv, jl)}, nil)})
	opening := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(open), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(open, string(b), jl), bump}, []clientv3.Op{clientv3.OpGet(open), bump})
	r, err := e.txn(ctx, "open generation", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(j.key), "=", j.rev), clientv3.Compare(clientv3.CreateRevision(closed), "=", 0)).
			Then(opening).Else(clientv3.OpGet(closed))
	})
	if err != nil {
		return etcdOpen{}, e.unreachable("open generation", err)
	}
	if !r.Succeeded {
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return etcdOpen{}, j.closedErr(kvs[0].Value)
		}
		return etcdOpen{}, errJobGone
	}
	o := r.Responses[0].GetResponseTxn()
	if o.Succeeded {
		return mine, nil
	}
	return parseOpen(open, o.Responses[0].GetResponseRange().Kvs[0].Value)
}

// claimKeys are the keys m claims in the generation at dir: its host name, its requested rank.
func claimKeys(dir string, m rendezvous.Member) []string {
	var claims []string
	if m.Host != "" {
		claims = append(claims, dir+"hosts/"+m.Host)
	}
	if m.Rank >= 0 {
		claims = append(claims, dir+"ranks/"+strconv.Itoa(m.Rank))
	}
	return claims
}

// claim takes this node's host name and requested rank in the generation at dir by transactions (create, or find
// its own instance there), on its lease: another live instance holding one is ErrDuplicateNode naming both.
func (e *etcdStore) claim(ctx context.Context, dir string, m rendezvous.Member, lease clientv3.LeaseID) error {
	opt := clientv3.WithLease(lease)
	for _, k := range claimKeys(dir, m) {
		resp, err := e.txn(ctx, "claim "+k, func(t clientv3.Txn) clientv3.Txn {
			return t.If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, m.Instance, opt)).Else(clientv3.OpGet(k))
		})
		if err != nil {
			return e.unreachable("claim "+k, err)
		}
		if resp.Succeeded {
			continue
		}
		other := string(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		if other == m.Instance {
			if err := e.put(ctx, k, m.Instance, opt); err != nil {
				return e.unreachable("claim "+k, err)
			}
			continue
		}
		ref := rendezvous.NodeRef{Rank: -1, Instance: other}
		if g, err := e.get(ctx, dir+"members/"+other); err == nil && len(g.Kvs) == 1 {
			var om rendezvous.Member
			if json.Unmarshal(g.Kvs[0].Value, &om) == nil {
				ref = om.Ref(om.Rank)
			}
		}
		what := "host"
		if strings.Contains(k, "/ranks/") {
			what = "node rank"
		}
		return agree.NewError(rendezvous.ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node (etcd key %s); each node must have its own host name and node rank", m.Generation, what, k),
			m.Ref(m.Rank), ref)
	}
	return nil
}
