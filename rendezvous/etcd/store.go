package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// etcdStore is the etcd v3 client of one Rendezvous. The keys of one job live under <prefix><run id>/<job>/,
// where <job> names the job instance (etcdJob).
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
		return nil, agree.ConfigError(failure.RendezvousEndpoint, "", "etcd rendezvous needs an endpoint: host:2379[,host:2379...]")
	}
	if cfg.NNodes < 1 {
		return nil, agree.ConfigError(failure.RendezvousNodes, "0", "etcd rendezvous needs a node count")
	}
	var eps []string
	for _, e := range strings.Split(cfg.Endpoint, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, agree.ConfigError(failure.RendezvousEndpoint, cfg.Endpoint, "an empty entry")
		}
		hostPort := strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
		if _, _, err := agree.SplitEndpoint(failure.RendezvousEndpoint, hostPort, false); err != nil {
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
// by the lease keeper (keepAlive).
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
