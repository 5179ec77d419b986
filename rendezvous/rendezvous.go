package rendezvous

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/setting"
)

// NewInstance returns a random instance id for one launcher process.
func NewInstance() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// Rendezvous is one node's handle on a backend, alive for the whole run (every generation). On the node that
// hosts the embedded server it owns the server.
type Rendezvous struct {
	cfg     Config
	log     *zap.Logger
	backend Backend
	store   Store
}

// New validates cfg and prepares the backend: the static world from cfg, the embedded server on the hosting node,
// the etcd client, or the world of one. Every configuration mistake it can see is an ErrConfig error here, before
// anything joins.
func New(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Conf == nil {
		cfg.Conf = map[string]string{}
	}
	if err := checkConfKeys(cfg.Conf); err != nil {
		return nil, err
	}
	linger, err := cfg.durations()
	if err != nil {
		return nil, err
	}
	if err := cfg.checkNodes(); err != nil {
		return nil, err
	}
	if cfg.RunID != "" {
		if err := ValidateRunID(cfg.RunID); err != nil {
			return nil, err
		}
	}
	r := &Rendezvous{cfg: cfg, log: cfg.Logger.With(zap.String("rdzv_backend", cfg.Backend))}
	if err := r.open(ctx, linger); err != nil {
		return nil, err
	}
	return r, nil
}

// durations fills in the timeouts from Conf (join_timeout, last_call_timeout, heartbeat) or the defaults, and
// returns the linger time (linger, default one heartbeat).
func (cfg *Config) durations() (linger time.Duration, err error) {
	for _, d := range []struct {
		v   *time.Duration
		key string
		def time.Duration
	}{{&cfg.Timeout, "join_timeout", DefaultTimeout}, {&cfg.LastCall, "last_call_timeout", DefaultLastCall}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
		if *d.v, err = confDuration(cfg.Conf, d.key, *d.v); err != nil {
			return 0, err
		}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat, err = heartbeat(cfg.Conf, cfg.Heartbeat); err != nil { // also torchrun's keep_alive_* keys
		return 0, err
	}
	torchrunConf(cfg)
	return confDuration(cfg.Conf, "linger", cfg.Heartbeat)
}

// checkNodes checks the node count, the minimum (0 becomes NNodes: a fixed size) and the requested node rank.
func (cfg *Config) checkNodes() error {
	if cfg.NNodes < 0 || cfg.NNodes > MaxNodes {
		return ConfigError(setting.RendezvousNodes, strconv.Itoa(cfg.NNodes), fmt.Sprintf("need 1..%d", MaxNodes))
	}
	if cfg.MinNodes < 0 || cfg.MinNodes > cfg.NNodes {
		return ConfigError(setting.RendezvousMinNodes, strconv.Itoa(cfg.MinNodes), fmt.Sprintf("need 1..%d (the node count), or 0 for a fixed size", cfg.NNodes))
	}
	if cfg.MinNodes == 0 {
		cfg.MinNodes = cfg.NNodes
	}
	if cfg.NodeRank < -1 || (cfg.NNodes > 0 && cfg.NodeRank >= cfg.NNodes) {
		return ConfigError(setting.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("need -1 (any) or 0..%d for %d nodes", cfg.NNodes-1, cfg.NNodes))
	}
	if cfg.MinNodes < cfg.NNodes && cfg.NodeRank >= cfg.MinNodes {
		return ConfigError(setting.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("an elastic world of %s nodes may have only %d: request a rank below %d, or none",
			SizeRange(cfg.MinNodes, cfg.NNodes), cfg.MinNodes, cfg.MinNodes))
	}
	return nil
}

// open prepares the backend cfg names. linger: how long a closed job stays learnable after its last node.
func (r *Rendezvous) open(ctx context.Context, linger time.Duration) error {
	b, err := Lookup(r.cfg.Backend)
	if err != nil {
		return err
	}
	r.backend = b
	r.store, err = b.Open(ctx, &r.cfg, r.log, linger)
	return err
}

// Store is the open backend: for a backend's own helpers and tests (the tcp backend's HostedServer).
func (r *Rendezvous) Store() Store { return r.store }

// Endpoint is the address of the server this node talks to (tcp, static), or the etcd endpoints.
func (r *Rendezvous) Endpoint() string { return r.store.Endpoint() }

// NamesNodes reports whether Join names a member without a host after its node's entry in the host list (a static
// world without an endpoint): a node then brings no name or address of its own.
func (r *Rendezvous) NamesNodes() bool { return r.backend.NamesNodes(&r.cfg) }

// Unauthenticated reports whether anyone who can reach this rendezvous could join it: a server (tcp, static) off
// loopback without a token, as Config.AllowUnauthenticated permits. The caller warns; etcd has its own TLS and auth.
func (r *Rendezvous) Unauthenticated() bool {
	if r.cfg.Token != "" || !r.backend.HostsServer() {
		return false
	}
	host, _, err := net.SplitHostPort(r.Endpoint())
	return err != nil || !IsLoopback(host)
}

// Join enters generation m.Generation (or, with LatestGeneration, the one being formed) and returns the agreed
// world. m.RunID defaults to Config.RunID, m.Rank to Config.NodeRank and m.Ports to freshly picked ports. It
// returns at once on a mismatch or duplicate, and after Config.Timeout (or ctx) with an ErrMissingNodes error
// naming who never arrived. The world of one takes m as given: nothing of it travels.
func (r *Rendezvous) Join(ctx context.Context, m Member) (Session, error) {
	if !r.backend.Solo() {
		var err error
		if m, err = r.complete(m); err != nil {
			return nil, err
		}
	}
	// The generation asked for (LatestGeneration: -1); the lines of the join add the one agreed as "generation".
	log := r.log.With(zap.String("host", m.Host), zap.String("instance", m.Instance), zap.Int("join_generation", m.Generation))
	return r.store.Join(ctx, m, log)
}

// complete fills in what m leaves to the rendezvous (see Join) and checks it.
func (r *Rendezvous) complete(m Member) (Member, error) {
	if m.RunID == "" {
		m.RunID = r.cfg.RunID
	}
	if m.Rank == -1 && r.cfg.NodeRank >= 0 {
		m.Rank = r.cfg.NodeRank
	}
	if m.Instance == "" {
		m.Instance = NewInstance()
	}
	if hosts := r.store.Hosts(); m.Host == "" && m.Rank >= 0 && m.Rank < len(hosts) {
		m.Host = hosts[m.Rank]
	}
	if m.Addr == "" {
		m.Addr = m.Host
	}
	if m.Ports == nil {
		p, err := PickPorts()
		if err != nil {
			return m, err
		}
		m.Ports = p
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	if limit := r.cfg.MinNodes; limit > 0 && m.Rank >= limit {
		return m, ConfigError(setting.RendezvousNodeRank, strconv.Itoa(m.Rank), fmt.Sprintf("the world may have only %d nodes", limit))
	}
	return m, nil
}

// Close releases the backend. A node hosting the server first waits (up to the linger time, default one
// heartbeat) for the other nodes to leave, so they can finish reading the verdict and learn that the job closed.
// On etcd the node stops keeping the job alive: its keys vanish linger after its last node closed.
func (r *Rendezvous) Close() error { return r.store.Close() }
