package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdBackend is the etcd v3 client of one Rendezvous. Keys live under <prefix><run id>/ (see doc.go).
type etcdBackend struct {
	cli    *clientv3.Client
	cfg    *Config
	log    *zap.Logger
	prefix string
	ttl    int64
}

func newEtcd(ctx context.Context, cfg *Config, log *zap.Logger) (*etcdBackend, error) {
	if cfg.Endpoint == "" {
		return nil, configError(FieldEndpoint, "", "etcd rendezvous needs an endpoint: host:2379[,host:2379...]")
	}
	if cfg.NNodes < 1 {
		return nil, configError(FieldNodes, "0", "etcd rendezvous needs a node count")
	}
	var eps []string
	for _, e := range strings.Split(cfg.Endpoint, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, configError(FieldEndpoint, cfg.Endpoint, "an empty entry")
		}
		hostPort := strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
		if _, _, err := splitEndpoint(FieldEndpoint, hostPort, false); err != nil {
			return nil, err
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

// put writes key, riding out a leader election (retry).
func (e *etcdBackend) put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	return e.retry(ctx, "put "+key, func(ctx context.Context) error {
		_, err := e.cli.Put(ctx, key, val, opts...)
		return err
	})
}

// genDir is the key prefix of one generation.
func (e *etcdBackend) genDir(runID string, g int) string {
	return fmt.Sprintf("%s%s/%d/", e.prefix, runID, g)
}

// latestKey holds the highest generation opened of a run, zero-padded (padGen) so that etcd's byte-wise
// comparison orders generations.
func (e *etcdBackend) latestKey(runID string) string { return e.prefix + runID + "/latest" }

func padGen(g int) string { return fmt.Sprintf("%010d", g) }

func (e *etcdBackend) unreachable(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("rendezvous: etcd at %s: %s: %w", e.cfg.Endpoint, what, context.Canceled)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return newError(ErrTimeout, fmt.Sprintf("etcd at %s: %s: %v; check the endpoint and that etcd is up", e.cfg.Endpoint, what, err))
	}
	return newError(ErrServerLost, fmt.Sprintf("etcd at %s: %s: %v; check the endpoint and that etcd is up", e.cfg.Endpoint, what, err))
}

// join enters m.Generation, or with LatestGeneration the generation being formed: when the world closes without
// this node (it came too late), it goes on to the next one.
func (e *etcdBackend) join(ctx context.Context, m Member, log *zap.Logger) (membership, *Assignment, error) {
	jctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	latest := m.Generation == LatestGeneration
	for {
		if latest {
			g, err := e.openGeneration(jctx, m.RunID)
			if err != nil {
				return nil, nil, err
			}
			m.Generation = g
		}
		s, asg, err := e.joinGeneration(ctx, jctx, m, log)
		if latest && errors.Is(err, ErrWorldFull) && jctx.Err() == nil {
			log.Info("rendezvous generation closed before this node got in; joining the next", zap.Int("generation", m.Generation))
			continue
		}
		return s, asg, err
	}
}

// openGeneration is the generation a LatestGeneration joiner enters: the latest one opened, or the next one when
// its world is already agreed.
func (e *etcdBackend) openGeneration(ctx context.Context, runID string) (int, error) {
	key := e.latestKey(runID)
	var resp *clientv3.GetResponse
	err := e.retry(ctx, "read the latest generation", func(ctx context.Context) (err error) {
		resp, err = e.cli.Get(ctx, key)
		return err
	})
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	g := 0
	if len(resp.Kvs) == 1 {
		if g, err = strconv.Atoi(string(resp.Kvs[0].Value)); err != nil || g < 0 {
			return 0, newError(ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not a generation", key, resp.Kvs[0].Value))
		}
	}
	var w *clientv3.GetResponse
	err = e.retry(ctx, "read the latest generation", func(ctx context.Context) (err error) {
		w, err = e.cli.Get(ctx, e.genDir(runID, g)+"world", clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	if w.Count > 0 {
		g++
	}
	return g, nil
}

// joinGeneration registers this node in one generation and waits for its world.
func (e *etcdBackend) joinGeneration(ctx, jctx context.Context, m Member, log *zap.Logger) (membership, *Assignment, error) {
	dir := e.genDir(m.RunID, m.Generation)
	var lg *clientv3.LeaseGrantResponse
	err := e.retry(jctx, "grant a lease", func(ctx context.Context) (err error) {
		lg, err = e.cli.Grant(ctx, e.ttl)
		return err
	})
	if err != nil {
		return nil, nil, e.unreachable("grant a lease", err)
	}
	revoke := func() { e.cli.Revoke(context.WithoutCancel(ctx), lg.ID) }
	body, _ := json.Marshal(m)
	opt := clientv3.WithLease(lg.ID)
	// the generation's first key marks its start: every node replays the generation's history from there, so all
	// see the same registrations in the same order even if some are gone again. Opening a generation also raises
	// the run's latest generation, which LatestGeneration joiners read.
	open, lk, gv := dir+"open", e.latestKey(m.RunID), padGen(m.Generation)
	bump := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}, []clientv3.Op{clientv3.OpPut(lk, gv)},
		[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(lk), "<", gv)}, []clientv3.Op{clientv3.OpPut(lk, gv)}, nil)})
	var oresp *clientv3.TxnResponse
	err = e.retry(jctx, "open generation", func(ctx context.Context) (err error) {
		oresp, err = e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(open), "=", 0)).
			Then(clientv3.OpPut(open, "1"), bump).Else(clientv3.OpGet(open), bump).Commit()
		return err
	})
	if err != nil {
		revoke()
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
		var resp *clientv3.TxnResponse
		err := e.retry(jctx, "claim "+k, func(ctx context.Context) (err error) {
			resp, err = e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, m.Instance, opt)).Else(clientv3.OpGet(k)).Commit()
			return err
		})
		if err != nil {
			revoke()
			return nil, nil, e.unreachable("claim "+k, err)
		}
		if resp.Succeeded {
			continue
		}
		other := string(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		if other == m.Instance {
			if err := e.put(jctx, k, m.Instance, opt); err != nil {
				return nil, nil, e.unreachable("claim "+k, err)
			}
			continue
		}
		revoke()
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
	s := newEtcdSession(e, log, dir, lg.ID, m)
	if err := e.put(jctx, dir+"members/"+m.Instance, string(body), opt); err != nil {
		revoke()
		return nil, nil, e.unreachable("register", err)
	}
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = wcancel
	ka, err := e.cli.KeepAlive(wctx, lg.ID)
	if err != nil {
		wcancel()
		revoke()
		return nil, nil, e.unreachable("keep the lease alive", err)
	}
	s.wg.Add(2)
	go s.watch(wctx, startRev)
	go s.keepalive(wctx, ka)
	asg, err := s.await(jctx)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	log.Info("rendezvous joined (etcd)", zap.Int("node_rank", asg.NodeRank), zap.Int("nnodes", len(asg.Nodes)), zap.Int("generation", asg.Generation))
	return s, asg, nil
}
