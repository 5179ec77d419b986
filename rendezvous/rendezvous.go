package rendezvous

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/freeport"
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

	mu     sync.Mutex
	picked map[string]int // the free ports picked for the first join that lacked them, kept for every later one
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
// world. m.RunID defaults to Config.RunID, m.Rank to Config.NodeRank, and m.Ports gets a free PortMaster and
// PortCoordinator where it has none (picked by the first join, the same for every later one). It returns at once
// on a mismatch or duplicate, and after Config.Timeout (or ctx) with an ErrMissingNodes error naming who never
// arrived. The world of one takes m as given: nothing of it travels.
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
	if err := r.pickPorts(&m); err != nil {
		return m, err
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	if limit := r.cfg.MinNodes; limit > 0 && m.Rank >= limit {
		return m, configError(failure.RendezvousNodeRank, strconv.Itoa(m.Rank), fmt.Sprintf("the world may have only %d nodes", limit))
	}
	return m, nil
}

// Close releases the backend. A node hosting the server first waits (up to the linger time, default one
// heartbeat) for the other nodes to leave, so they can finish reading the verdict and learn that the job closed.
// On etcd the node stops keeping the job alive: its keys vanish linger after its last node closed.
func (r *Rendezvous) Close() error { return r.store.Close() }

// pickPorts gives m the ports node 0 shares that m.Ports lacks: a free PortMaster and PortCoordinator, told apart,
// below the kernel's ephemeral range where no outgoing connection can take them first (freeport.Pick), picked once
// and the same for every generation. The MegaScale port is the caller's to add: a TPU convention, not a free port.
// The caller's map is not changed.
func (r *Rendezvous) pickPorts(m *Member) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.picked == nil {
		r.picked = map[string]int{}
	}
	m.Ports = maps.Clone(m.Ports)
	if m.Ports == nil {
		m.Ports = map[string]int{}
	}
	for _, k := range []string{PortMaster, PortCoordinator} {
		if m.Ports[k] != 0 {
			continue
		}
		if r.picked[k] == 0 {
			p, err := freeport.Pick("")
			if err == nil && k == PortCoordinator && p == m.Ports[PortMaster] {
				p, err = freeport.Pick("")
			}
			if err != nil {
				return fmt.Errorf("rendezvous: pick the ports node 0 shares: %w", err)
			}
			r.picked[k] = p
		}
		m.Ports[k] = r.picked[k]
	}
	return nil
}

// IsLoopback reports whether host names only loopback addresses (an empty host means every interface): an
// endpoint or listen address that is not needs Config.Token, unless Config.AllowUnauthenticated.
func IsLoopback(host string) bool {
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
