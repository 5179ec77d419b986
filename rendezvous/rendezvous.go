package rendezvous

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Backend names (torchrun's --rdzv-backend).
const (
	BackendStatic = "static"
	BackendTCP    = "tcp"
	BackendEtcd   = "etcd"
)

// Config selects and configures a backend; the field names follow torchrun's flags.
type Config struct {
	// Backend is BackendStatic, BackendTCP (alias "c10d") or BackendEtcd (alias "etcd-v2").
	Backend string
	// Endpoint is host:port of the server (tcp, static) or a comma-separated list of etcd endpoints.
	Endpoint string
	// RunID is --rdzv-id; a Member without one gets it.
	RunID string
	// Conf holds --rdzv-conf key=value pairs (ParseConf): join_timeout, heartbeat, is_host, port, hosts, prefix,
	// linger.
	Conf map[string]string
	// NNodes is the number of nodes (--nnodes). Static: taken from the host list when 0.
	NNodes int
	// NodeRank is --node-rank, -1 for any. Static: taken from the environment when -1.
	NodeRank int
	// Timeout bounds the join (--rdzv-timeout) and each barrier or gather without a context deadline.
	Timeout time.Duration
	// Heartbeat is how long a silent node (or an expired etcd lease) takes to be reported lost.
	Heartbeat time.Duration
	// Token is the shared secret (--rdzv-token); required when the server listens off loopback.
	Token string
	// Listen is where a node hosting the server binds; default the endpoint.
	Listen string
	// Hosts is the static host list; read from the environment when empty.
	Hosts []string
	// Getenv reads the environment for the static backend; os.Getenv when nil.
	Getenv     func(string) string
	MaxMessage int
	MaxConns   int
	Logger     *zap.Logger
}

// confKeys are the --rdzv-conf keys understood.
var confKeys = []string{"heartbeat", "hosts", "is_host", "join_timeout", "linger", "port", "prefix"}

// ParseConf parses --rdzv-conf: comma-separated key=value pairs ("join_timeout=60,is_host=true").
func ParseConf(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, newError(ErrConfig, fmt.Sprintf("--rdzv-conf %q: %q is not key=value", s, kv))
		}
		if _, dup := out[k]; dup {
			return nil, newError(ErrConfig, fmt.Sprintf("--rdzv-conf %q: key %q given twice", s, k))
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// confDuration reads a duration given as seconds ("30", "0.5") or a Go duration ("30s").
func confDuration(conf map[string]string, key string, def time.Duration) (time.Duration, error) {
	v, ok := conf[key]
	if !ok {
		return def, nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e6 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, newError(ErrConfig, fmt.Sprintf("--rdzv-conf %s=%q is not a positive duration (seconds, or like 30s)", key, v))
}

// NewInstance returns a random instance id for one launcher process.
func NewInstance() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// backend is what a Session needs from a joined connection.
type backend interface {
	barrier(ctx context.Context, name string) error
	publish(ctx context.Context, key string, data []byte) error
	gather(ctx context.Context, key string) (map[int][]byte, error)
	fail(ctx context.Context, f Failure) error
	leave(ctx context.Context) error
	failures() <-chan Failure
	close() error
}

// Rendezvous is one node's handle on a backend, alive for the whole run (every generation). On the node that
// hosts the embedded server it owns the server.
type Rendezvous struct {
	cfg      Config
	log      *zap.Logger
	endpoint string
	hosts    []string
	server   *Server
	etcd     *etcdBackend
	linger   time.Duration
}

// New validates cfg and prepares the backend: the static world from flags or env, the embedded server on the
// hosting node, or the etcd client.
func New(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Conf == nil {
		cfg.Conf = map[string]string{}
	}
	for k := range cfg.Conf {
		i := sort.SearchStrings(confKeys, k)
		if i == len(confKeys) || confKeys[i] != k {
			return nil, newError(ErrConfig, fmt.Sprintf("--rdzv-conf key %q is unknown; known keys: %s", k, strings.Join(confKeys, ", ")))
		}
	}
	var err error
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout, err = confDuration(cfg.Conf, "join_timeout", cfg.Timeout); err != nil {
		return nil, err
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat, err = confDuration(cfg.Conf, "heartbeat", cfg.Heartbeat); err != nil {
		return nil, err
	}
	r := &Rendezvous{cfg: cfg, log: cfg.Logger.With(zap.String("rdzv_backend", cfg.Backend))}
	if r.linger, err = confDuration(cfg.Conf, "linger", cfg.Heartbeat); err != nil {
		return nil, err
	}
	if cfg.NNodes < 0 || cfg.NNodes > MaxNodes {
		return nil, newError(ErrConfig, fmt.Sprintf("--nnodes %d: need 1..%d", cfg.NNodes, MaxNodes))
	}
	if cfg.NodeRank < -1 || (cfg.NNodes > 0 && cfg.NodeRank >= cfg.NNodes) {
		return nil, newError(ErrConfig, fmt.Sprintf("--node-rank %d with --nnodes %d: need -1 (any) or 0..%d", cfg.NodeRank, cfg.NNodes, cfg.NNodes-1))
	}
	switch cfg.Backend {
	case BackendStatic:
		err = r.newStatic()
	case BackendTCP, "c10d":
		err = r.newTCP()
	case BackendEtcd, "etcd-v2":
		r.etcd, err = newEtcd(ctx, &r.cfg, r.log)
	default:
		err = newError(ErrConfig, fmt.Sprintf("--rdzv-backend %q is unknown; use static, tcp or etcd", cfg.Backend))
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Rendezvous) newStatic() error {
	c := &r.cfg
	hosts := c.Hosts
	if h, ok := c.Conf["hosts"]; ok && len(hosts) == 0 {
		var err error
		if hosts, err = ParseHosts(h); err != nil {
			return fmt.Errorf("--rdzv-conf hosts: %w", err)
		}
	}
	if c.NodeRank < 0 || len(hosts) == 0 {
		st, ok, err := StaticFromEnv(c.Getenv)
		if err != nil {
			return err
		}
		if !ok && c.NodeRank < 0 {
			return newError(ErrConfig, "static rendezvous needs a node rank: set --node-rank, or TPU_WORKER_ID (+TPU_WORKER_HOSTNAMES), SLURM_NODEID (+SLURM_JOB_NODELIST) or JOB_COMPLETION_INDEX")
		}
		if ok {
			if c.NodeRank < 0 {
				c.NodeRank = st.NodeRank
			}
			if len(hosts) == 0 {
				hosts = st.Hosts
			}
			r.log.Debug("static rendezvous from env", zap.String("source", st.Source), zap.Int("node_rank", st.NodeRank))
		}
	}
	if len(hosts) > 0 {
		if c.NNodes == 0 {
			c.NNodes = len(hosts)
		}
		if c.NNodes != len(hosts) {
			return newError(ErrConfig, fmt.Sprintf("--nnodes %d but the host list has %d hosts (%s)", c.NNodes, len(hosts), strings.Join(hosts, ",")))
		}
	}
	if c.NNodes == 0 {
		return newError(ErrConfig, "static rendezvous needs --nnodes or a host list (TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST, --rdzv-conf hosts=...)")
	}
	if c.NodeRank >= c.NNodes {
		return newError(ErrConfig, fmt.Sprintf("node rank %d but there are %d nodes", c.NodeRank, c.NNodes))
	}
	r.hosts = hosts
	r.endpoint = c.Endpoint
	if r.endpoint == "" {
		if len(hosts) == 0 {
			return newError(ErrConfig, "static rendezvous without a host list needs --rdzv-endpoint (node 0's host:port)")
		}
		port := c.Conf["port"]
		if port == "" {
			port = strconv.Itoa(DefaultPort)
		}
		r.endpoint = net.JoinHostPort(hosts[0], port)
	}
	if c.NodeRank == 0 {
		return r.host(true)
	}
	return nil
}

func (r *Rendezvous) newTCP() error {
	if r.cfg.NNodes < 1 {
		return newError(ErrConfig, "tcp rendezvous needs --nnodes")
	}
	isHost := r.cfg.Conf["is_host"]
	switch isHost {
	case "true", "1", "false", "0", "", "auto":
	default:
		return newError(ErrConfig, fmt.Sprintf("--rdzv-conf is_host=%q: use true, false or auto", isHost))
	}
	r.endpoint = r.cfg.Endpoint
	if r.endpoint == "" {
		ep, err := r.defaultTCPEndpoint()
		if err != nil {
			return err
		}
		r.endpoint = ep
	}
	switch isHost {
	case "true", "1":
		return r.host(true)
	case "false", "0":
		return nil
	}
	return r.host(false)
}

// defaultTCPEndpoint is the endpoint of a tcp rendezvous without --rdzv-endpoint, on --rdzv-conf port (default
// DefaultPort): loopback for one node; for several, host 0 of a host list that names every node (Config.Hosts,
// --rdzv-conf hosts, TPU_WORKER_HOSTNAMES or SLURM_JOB_NODELIST). Anything else is a configuration error: a
// loopback default would have every node host a private server and wait out the timeout alone.
func (r *Rendezvous) defaultTCPEndpoint() (string, error) {
	port := r.cfg.Conf["port"]
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	}
	if r.cfg.NNodes == 1 {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	need := fmt.Sprintf("tcp rendezvous with --nnodes %d needs --rdzv-endpoint (node 0's host:port)", r.cfg.NNodes)
	hosts, source, err := r.hostList()
	switch {
	case err != nil:
		return "", fmt.Errorf("%s; the host list that could name node 0 is unusable: %w", need, err)
	case len(hosts) == 0:
		return "", newError(ErrConfig, need+", or a host list naming every node (TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or --rdzv-conf hosts=...)")
	case len(hosts) != r.cfg.NNodes:
		return "", newError(ErrConfig, fmt.Sprintf("%s: the host list from %s has %d hosts, not %d, so its first host need not be node 0",
			need, source, len(hosts), r.cfg.NNodes))
	}
	r.log.Debug("tcp rendezvous endpoint from the host list", zap.String("source", source), zap.String("host", hosts[0]))
	return net.JoinHostPort(hosts[0], port), nil
}

// hostList is the job's host list for a backend that needs only node 0's host, and where it came from:
// Config.Hosts, --rdzv-conf hosts, TPU_WORKER_HOSTNAMES or SLURM_JOB_NODELIST (the first that is set).
func (r *Rendezvous) hostList() ([]string, string, error) {
	if len(r.cfg.Hosts) > 0 {
		return r.cfg.Hosts, "the configured host list", nil
	}
	if h, ok := r.cfg.Conf["hosts"]; ok {
		hosts, err := ParseHosts(h)
		if err != nil {
			return nil, "", fmt.Errorf("--rdzv-conf hosts: %w", err)
		}
		return hosts, "--rdzv-conf hosts", nil
	}
	if v := r.cfg.Getenv("TPU_WORKER_HOSTNAMES"); v != "" {
		hosts, err := ParseHosts(v)
		if err != nil {
			return nil, "", fmt.Errorf("TPU_WORKER_HOSTNAMES=%q: %w", v, err)
		}
		return hosts, "TPU_WORKER_HOSTNAMES", nil
	}
	if v := r.cfg.Getenv("SLURM_JOB_NODELIST"); v != "" {
		hosts, err := ParseSlurmNodelist(v)
		if err != nil {
			return nil, "", fmt.Errorf("SLURM_JOB_NODELIST=%q: %w", v, err)
		}
		return hosts, "SLURM_JOB_NODELIST", nil
	}
	return nil, "", nil
}

// host starts the embedded server on the endpoint (or cfg.Listen). When must is false, a failure to bind
// because the address is taken or not local means another node hosts it.
func (r *Rendezvous) host(must bool) error {
	addr := r.cfg.Listen
	if addr == "" {
		addr = r.endpoint
	}
	s, err := Listen(ServerConfig{Addr: addr, Token: r.cfg.Token, Heartbeat: r.cfg.Heartbeat, Timeout: r.cfg.Timeout,
		MaxMessage: r.cfg.MaxMessage, MaxConns: r.cfg.MaxConns, Logger: r.cfg.Logger})
	if err != nil {
		if !must && (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
			r.log.Debug("rendezvous server hosted elsewhere", zap.String("endpoint", r.endpoint), zap.Error(err))
			return nil
		}
		return err
	}
	r.server = s
	if r.cfg.Listen != "" && r.cfg.Endpoint == "" {
		r.endpoint = s.Addr()
	}
	if _, port, _ := net.SplitHostPort(r.endpoint); port == "0" {
		r.endpoint = s.Addr()
	}
	r.log.Info("rendezvous server started", zap.String("addr", s.Addr()))
	return nil
}

// Server is the embedded server this node hosts, or nil.
func (r *Rendezvous) Server() *Server { return r.server }

// Endpoint is the address of the server this node talks to (tcp, static).
func (r *Rendezvous) Endpoint() string { return r.endpoint }

// Join enters generation m.Generation and returns the agreed world. m.RunID defaults to Config.RunID, m.Rank to
// Config.NodeRank and m.Ports to freshly picked ports. It returns at once on a mismatch or duplicate, and after
// Config.Timeout (or ctx) with an ErrMissingNodes error naming who never arrived.
func (r *Rendezvous) Join(ctx context.Context, m Member) (*Session, error) {
	if m.RunID == "" {
		m.RunID = r.cfg.RunID
	}
	if m.Rank == -1 && r.cfg.NodeRank >= 0 {
		m.Rank = r.cfg.NodeRank
	}
	if m.Instance == "" {
		m.Instance = NewInstance()
	}
	if m.Host == "" && m.Rank >= 0 && m.Rank < len(r.hosts) {
		m.Host = r.hosts[m.Rank]
	}
	if m.Addr == "" {
		m.Addr = m.Host
	}
	if m.Ports == nil {
		p, err := PickPorts()
		if err != nil {
			return nil, err
		}
		m.Ports = p
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	nnodes := r.cfg.NNodes
	if m.Rank >= nnodes && nnodes > 0 {
		return nil, newError(ErrConfig, fmt.Sprintf("node rank %d but --nnodes is %d", m.Rank, nnodes))
	}
	log := r.log.With(zap.String("host", m.Host), zap.String("instance", m.Instance), zap.Int("generation", m.Generation))
	if r.etcd != nil {
		b, asg, err := r.etcd.join(ctx, m, log)
		if err != nil {
			return nil, err
		}
		return &Session{asg: asg, b: b}, nil
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := dial(dctx, r.endpoint, r.cfg.Token, r.cfg.Heartbeat, maxOr(r.cfg.MaxMessage), log)
	if err != nil {
		return nil, err
	}
	resp, err := c.call(ctx, &message{Type: msgJoin, Member: &m, NNodes: nnodes, Hosts: r.hosts}, time.Until(deadline))
	if err == nil && resp.Assignment == nil {
		err = newError(ErrProtocol, "join reply without an assignment")
	}
	if err != nil {
		c.close()
		return nil, err
	}
	log.Info("rendezvous joined", zap.Int("node_rank", resp.Assignment.NodeRank), zap.Int("nnodes", len(resp.Assignment.Nodes)))
	return &Session{asg: resp.Assignment, b: &tcpSession{c: c, timeout: r.cfg.Timeout}}, nil
}

func maxOr(n int) int {
	if n <= 0 {
		return DefaultMaxMessage
	}
	return n
}

// Close releases the backend. A node hosting the server first waits (up to the linger time, default one
// heartbeat) for the other nodes to leave, so they can finish reading the verdict.
func (r *Rendezvous) Close() error {
	var err error
	if r.server != nil {
		r.server.Drain(r.linger)
		err = r.server.Close()
	}
	if r.etcd != nil {
		err = errors.Join(err, r.etcd.close())
	}
	return err
}

// Session is one node's membership in one generation.
type Session struct {
	asg  *Assignment
	b    backend
	once sync.Once
}

// Assignment is the agreed world (a copy).
func (s *Session) Assignment() *Assignment {
	a := *s.asg
	a.Nodes = append([]Node(nil), s.asg.Nodes...)
	a.Ports = map[string]int{}
	for k, v := range s.asg.Ports {
		a.Ports[k] = v
	}
	return &a
}

// Barrier returns when every node has reached the barrier name, or fails with ErrNodeLost or ErrTimeout naming
// the nodes concerned.
func (s *Session) Barrier(ctx context.Context, name string) error { return s.b.barrier(ctx, name) }

// Publish stores data under key for this node.
func (s *Session) Publish(ctx context.Context, key string, data []byte) error {
	return s.b.publish(ctx, key, data)
}

// Gather waits until every node has published key and returns the data by node rank.
func (s *Session) Gather(ctx context.Context, key string) (map[int][]byte, error) {
	return s.b.gather(ctx, key)
}

// Fail tells every other node that this node failed; they hear it on Failures.
func (s *Session) Fail(ctx context.Context, f Failure) error {
	if f.At.IsZero() {
		f.At = time.Now()
	}
	return s.b.fail(ctx, f)
}

// Failures delivers the failures of other nodes and the loss of nodes (or of the server). It is closed when the
// session ends.
func (s *Session) Failures() <-chan Failure { return s.b.failures() }

// Leave tells the others this node is done; its disappearance afterwards is not a failure.
func (s *Session) Leave(ctx context.Context) error { return s.b.leave(ctx) }

// Close ends the session (without Leave, the others see this node as lost).
func (s *Session) Close() error {
	var err error
	s.once.Do(func() { err = s.b.close() })
	return err
}
