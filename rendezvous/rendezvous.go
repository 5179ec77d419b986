package rendezvous

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"tpurun/internal/freeport"
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
	if _, err := confDuration(cfg.Conf, "progress_interval", 0); err != nil { // read by the backends
		return 0, err
	}
	return confDuration(cfg.Conf, "linger", cfg.Heartbeat)
}

// checkNodes checks the node count, the minimum (0 becomes NNodes: a fixed size) and the requested node rank.
func (cfg *Config) checkNodes() error {
	if cfg.NNodes < 0 || cfg.NNodes > MaxNodes {
		return configError(setting.RendezvousNodes, strconv.Itoa(cfg.NNodes), fmt.Sprintf("need 1..%d", MaxNodes))
	}
	if cfg.MinNodes < 0 || cfg.MinNodes > cfg.NNodes {
		return configError(setting.RendezvousMinNodes, strconv.Itoa(cfg.MinNodes), fmt.Sprintf("need 1..%d (the node count), or 0 for a fixed size", cfg.NNodes))
	}
	if cfg.MinNodes == 0 {
		cfg.MinNodes = cfg.NNodes
	}
	if cfg.NodeRank < -1 || (cfg.NNodes > 0 && cfg.NodeRank >= cfg.NNodes) {
		return configError(setting.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("need -1 (any) or 0..%d for %d nodes", cfg.NNodes-1, cfg.NNodes))
	}
	if cfg.MinNodes < cfg.NNodes && cfg.NodeRank >= cfg.MinNodes {
		return configError(setting.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("an elastic world of %d..%d nodes may have only %d: request a rank below %d, or none",
			cfg.MinNodes, cfg.NNodes, cfg.MinNodes, cfg.MinNodes))
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
// world. m.RunID defaults to Config.RunID, m.Rank to Config.NodeRank, and m.Ports gets a free PortMaster and
// PortCoordinator where it has none. It
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
	if err := pickPorts(&m); err != nil {
		return m, err
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	if limit := r.cfg.MinNodes; limit > 0 && m.Rank >= limit {
		return m, configError(setting.RendezvousNodeRank, strconv.Itoa(m.Rank), fmt.Sprintf("the world may have only %d nodes", limit))
	}
	return m, nil
}

// Close releases the backend. A node hosting the server first waits (up to the linger time, default one
// heartbeat) for the other nodes to leave, so they can finish reading the verdict and learn that the job closed.
// On etcd the node stops keeping the job alive: its keys vanish linger after its last node closed.
func (r *Rendezvous) Close() error { return r.store.Close() }

// Session is one node's membership in one generation, as Rendezvous.Join returns it on every backend: the agreed
// world, barriers, an exchange of data, failures both ways, and the close of the job.
type Session interface {
	// Assignment is the agreed world (a copy).
	Assignment() *Assignment
	// Barrier returns when every node has reached the barrier name, or fails with a *NodeLostError or ErrTimeout
	// naming the nodes concerned.
	Barrier(ctx context.Context, name string) error
	// Publish stores data under key for this node.
	Publish(ctx context.Context, key string, data []byte) error
	// Gather waits until every node has published key and returns the data by node rank; a node gone without
	// publishing fails it with a *NodeLostError.
	Gather(ctx context.Context, key string) (map[int][]byte, error)
	// Fail tells every other node that this node failed (At defaults to now); they hear it on Failures.
	Fail(ctx context.Context, f Failure) error
	// Failures delivers the failures of other nodes and the loss of nodes (or of the server). It is closed when the
	// session ends.
	Failures() <-chan Failure
	// Waiting is the number of nodes already in the next generation, waiting for this one to restart: a node that
	// came back or a new one (joined with LatestGeneration), or one of this world that restarted first. An elastic
	// launcher whose world is below its maximum may restart to take them in.
	Waiting(ctx context.Context) (int, error)
	// Finish closes the job (see the package doc's lifecycle): this session's generation is the job's last, and it
	// ended with exit code code, the world's verdict. Every node of the final world calls it once the verdict is
	// agreed and no restart follows, before Leave: the first call records the close, the others find it recorded.
	// From then on every node waiting for a later generation, and every node that joins while the record lasts,
	// gets a *JobClosedError.
	Finish(ctx context.Context, code int) error
	// Done is closed when the session can no longer work: the rendezvous store is lost (the embedded server gone,
	// etcd unreachable: within about two heartbeats) or the session was closed. Every call of the session waiting
	// on the store returns then.
	Done() <-chan struct{}
	// Err is nil until Done is closed; then it says why: an error matching ErrStoreLost that names the store's
	// endpoint, or ErrClosed.
	Err() error
	// Leave tells the others this node is done; its disappearance afterwards is not a failure.
	Leave(ctx context.Context) error
	// Close ends the session (without Leave, the others see this node as lost). Calling it again does nothing.
	Close() error
}

// Clone is a copy of a that its receiver may change.
func (a *Assignment) Clone() *Assignment {
	c := *a
	c.Nodes = append([]Node(nil), a.Nodes...)
	c.Layout = append([]Span(nil), a.Layout...)
	c.Ports = map[string]int{}
	for k, v := range a.Ports {
		c.Ports[k] = v
	}
	return &c
}

// Stamped is f with its time set to now when it has none.
func (f Failure) Stamped() Failure {
	if f.At.IsZero() {
		f.At = time.Now()
	}
	return f
}

// pickPorts gives m the ports node 0 shares that m.Ports lacks: a free PortMaster and PortCoordinator, told apart,
// below the kernel's ephemeral range where no outgoing connection can take them first (freeport.Pick). The
// MegaScale port is the caller's to add: a TPU convention, not a free port. The caller's map is not changed.
func pickPorts(m *Member) error {
	m.Ports = maps.Clone(m.Ports)
	if m.Ports == nil {
		m.Ports = map[string]int{}
	}
	for _, k := range []string{PortMaster, PortCoordinator} {
		if m.Ports[k] != 0 {
			continue
		}
		p, err := freeport.Pick("")
		if err == nil && k == PortCoordinator && p == m.Ports[PortMaster] {
			p, err = freeport.Pick("")
		}
		if err != nil {
			return fmt.Errorf("rendezvous: pick the ports node 0 shares: %w", err)
		}
		m.Ports[k] = p
	}
	return nil
}

// Defaults.
const (
	DefaultHeartbeat = 5 * time.Second
	DefaultTimeout   = 5 * time.Minute
	// DefaultLastCall is how long an elastic join waits for more nodes once it has MinNodes (torchrun's
	// last_call_timeout).
	DefaultLastCall = 30 * time.Second
	DefaultPort     = 29400
)

// Config selects and configures a backend; the field names follow torchrun's flags.
type Config struct {
	// Backend names a registered backend (Backends: static, tcp alias c10d, etcd alias etcd-v2), or "" for the world of
	// one (Lookup).
	Backend string
	// Endpoint is host:port of the server (tcp, static) or a comma-separated list of etcd endpoints. Port 0 is
	// accepted only on the node that hosts the server (is_host=true, or a world of one node).
	Endpoint string
	// RunID names the job (ValidateRunID); a Member without one gets it.
	RunID string
	// Conf holds key=value options (ParseConf): join_timeout, last_call_timeout, heartbeat, is_host, port, hosts,
	// prefix, linger, progress_interval (how often a waiting node says who has arrived and who is missing, default
	// 5 s); etcd over TLS, as torchrun's: protocol (http or https), cacert, cert, key.
	Conf map[string]string
	// NNodes is the number of nodes, the most nodes of an elastic world. Static: taken from the host list when 0.
	NNodes int
	// MinNodes is the fewest nodes of an elastic world (tcp, etcd): a join completes with MinNodes..NNodes nodes
	// (see LastCall). 0 means NNodes: a fixed size.
	MinNodes int
	// NodeRank is the requested node rank, -1 for any. Static: taken from the environment when -1. In an elastic
	// world it must be below MinNodes.
	NodeRank int
	// Timeout bounds the join (join_timeout) and each barrier or gather without a context deadline.
	Timeout time.Duration
	// LastCall: once an elastic join has MinNodes nodes, it waits this much longer for more (up to NNodes), then
	// completes with those present (last_call_timeout). Default DefaultLastCall.
	LastCall time.Duration
	// Heartbeat is how often a node proves it lives (a ping; on etcd, its lease's renewal): a node silent for
	// SilentBeats heartbeats is reported lost (SilenceLimit; on etcd, its lease lives that long after its last
	// renewal).
	Heartbeat time.Duration
	// Token is the shared secret; required when the endpoint or the listen address is not loopback, unless
	// AllowUnauthenticated.
	Token string
	// AllowUnauthenticated lets a world without a Token meet off loopback: for a world its launch lays out
	// (torchrun's static line, a slice described by its hosts' environment), whose workers' store on MASTER_PORT has
	// no authentication either. Rendezvous.Unauthenticated then reports it, for the caller to warn.
	AllowUnauthenticated bool
	// Listen is where a node hosting the server binds; default the endpoint.
	Listen string
	// Hosts is the job's host list in node order, when the caller knows one (the launcher takes it from detection
	// or the hosts option; this package reads no environment): the static world, and node 0's host for a tcp
	// rendezvous without an endpoint.
	Hosts []string
	// MaxMessage, MaxConns, MaxUnauth and AuthTimeout configure a hosted server (tcp.ServerConfig); 0 for defaults.
	MaxMessage  int
	MaxConns    int
	MaxUnauth   int
	AuthTimeout time.Duration
	// Resolver looks up the endpoint's host name (tcp, static); nil means net.DefaultResolver. A name that does
	// not resolve yet is waited for within Timeout (tcp/resolve.go).
	Resolver *net.Resolver
	Logger   *zap.Logger
}

// confKeys are the Conf keys understood, sorted: tpurun's, and torchrun's (c10d and etcd) that ParseConf keeps.
var confKeys = []string{"cacert", "cert", "close_timeout", "heartbeat", "heartbeat_timeout", "hosts", "is_host", "join_timeout", "keep_alive_interval", "keep_alive_max_attempt",
	"key", "last_call_timeout", "linger", "port", "prefix", "progress_interval", "protocol", "read_timeout", "store_type", "use_libuv"}

// confAliases are torchrun's keys that mean one of tpurun's: its etcd backend's "timeout" is the join timeout,
// etcd_prefix the key prefix. (heartbeat_timeout, the time after which a silent node is lost, is SilentBeats
// heartbeats: see heartbeat.)
var confAliases = map[string]string{"timeout": "join_timeout", "etcd_prefix": "prefix"}

// noEffectConf are torchrun's keys that are accepted and do nothing under tpurun (its messages have their own
// bounds, and it has no TCPStore to tune).
var noEffectConf = []string{"close_timeout", "read_timeout", "store_type", "use_libuv"}

// ParseConf parses options given as comma-separated key=value pairs ("join_timeout=60,is_host=true"), as torchrun
// takes --rdzv-conf: white space and quotes around the whole list, a key or a value are dropped (a shell that kept
// them, or a test that passes "'timeout=5'"), torchrun's aliases become tpurun's keys (timeout: join_timeout,
// etcd_prefix: prefix; the tpurun key wins when both are given), and is_host takes
// torchrun's booleans (yes, no, t, f, ...). Unknown keys are refused later, by New or CheckConf.
func ParseConf(s string) (map[string]string, error) {
	out := map[string]string{}
	s = unquote(s)
	if s == "" {
		return out, nil
	}
	aliased := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = unquote(k), unquote(v)
		if !ok || k == "" {
			return nil, configError(setting.RendezvousOption, kv, "not key=value")
		}
		_, dup := out[k]
		if to, ok := confAliases[k]; ok {
			_, dup = aliased[to+"\x00"+k]
			aliased[to+"\x00"+k] = v
		} else {
			out[k] = v
		}
		if dup {
			return nil, configError(setting.RendezvousOption, kv, fmt.Sprintf("key %q given twice", k))
		}
	}
	for key, v := range aliased {
		if to, _, _ := strings.Cut(key, "\x00"); out[to] == "" {
			out[to] = v
		}
	}
	if v, ok := out["is_host"]; ok {
		out["is_host"] = torchBool(v)
	}
	return out, nil
}

// CheckConf refuses a key that neither tpurun nor torchrun knows, naming the known keys.
func CheckConf(conf map[string]string) error { return checkConfKeys(conf) }

// unquote drops white space and quotes around s.
func unquote(s string) string {
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(s), `'"`))
}

// torchBool maps torchrun's booleans (RendezvousParameters.get_as_bool) to "true" and "false"; anything else is
// kept for the backend to refuse.
func torchBool(v string) string {
	switch strings.ToLower(v) {
	case "1", "true", "t", "yes", "y", "on":
		return "true"
	case "0", "false", "f", "no", "n", "off":
		return "false"
	}
	return v
}

// withDefaultPort is endpoint with the backend's default port added where a host is given without one, as
// torchrun's parse_rendezvous_endpoint does: DefaultPort (tcp, c10d, static), 2379 for each etcd endpoint. An
// IPv6 address may be given bare or in brackets.
func withDefaultPort(backend, endpoint string) string {
	port := strconv.Itoa(DefaultPort)
	if b, err := Lookup(backend); err == nil {
		port = strconv.Itoa(b.Port())
	}
	parts := strings.Split(endpoint, ",")
	for i, ep := range parts {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(ep); err == nil {
			continue
		}
		host := strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]")
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			continue // neither a host nor an IPv6 address: left for the endpoint check to refuse
		}
		parts[i] = net.JoinHostPort(host, port)
	}
	return strings.Join(parts, ",")
}

// checkConfKeys refuses an unknown key.
func checkConfKeys(conf map[string]string) error {
	for k, v := range conf {
		i := sort.SearchStrings(confKeys, k)
		if i == len(confKeys) || confKeys[i] != k {
			return configError(setting.RendezvousOption, k+"="+v, "unknown key; known keys: "+strings.Join(confKeys, ", "))
		}
	}
	return nil
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
	return 0, configError(setting.RendezvousOption, key+"="+v, "not a positive duration (seconds, or like 30s)")
}

// heartbeat is the heartbeat: the heartbeat option, else the one whose silence limit (SilentBeats heartbeats) is
// torchrun's heartbeat_timeout, else torchrun's keep_alive_interval x keep_alive_max_attempt (5 s x 3 by default
// there: a heartbeat of 5 s) when either is given, else def.
func heartbeat(conf map[string]string, def time.Duration) (time.Duration, error) {
	_, i := conf["keep_alive_interval"]
	_, n := conf["keep_alive_max_attempt"]
	_, limit := conf["heartbeat_timeout"]
	if _, hb := conf["heartbeat"]; hb || !i && !n && !limit {
		return confDuration(conf, "heartbeat", def)
	}
	if limit {
		d, err := confDuration(conf, "heartbeat_timeout", def)
		return d / SilentBeats, err
	}
	interval, err := confDuration(conf, "keep_alive_interval", 5*time.Second)
	if err != nil {
		return 0, err
	}
	attempts, err := strconv.Atoi(cmp.Or(conf["keep_alive_max_attempt"], "3"))
	if err != nil || attempts < 1 || attempts > 1000 {
		return 0, configError(setting.RendezvousOption, "keep_alive_max_attempt="+conf["keep_alive_max_attempt"], "not a whole number from 1")
	}
	return interval * time.Duration(attempts) / SilentBeats, nil
}

// torchrunConf applies what torchrun's settings mean beyond the options' values: an endpoint without a port gets
// the default one, and the keys that have no effect here are logged.
func torchrunConf(cfg *Config) {
	for _, k := range noEffectConf {
		if v, ok := cfg.Conf[k]; ok {
			cfg.Logger.Info("torchrun rendezvous option accepted with no effect under tpurun", zap.String("option", k+"="+v))
		}
	}
	cfg.Endpoint = withDefaultPort(cfg.Backend, cfg.Endpoint)
}

// MaxRunID is the longest run id accepted, in bytes.
const MaxRunID = 128

// ValidateRunID checks a run id: it names etcd keys and directories and travels in environment entries, so it
// must be 1..MaxRunID bytes of UTF-8 without '/', '\', '=', control or format characters, leading or trailing
// white space, and not "." or "..". The error is an *Error matching ErrConfig with Field setting.RendezvousRunID.
func ValidateRunID(id string) error {
	bad := func(why string) error {
		return configError(setting.RendezvousRunID, id, why+"; use letters, digits and -_.:@+ (at most "+strconv.Itoa(MaxRunID)+" bytes)")
	}
	switch {
	case id == "":
		return bad("empty")
	case len(id) > MaxRunID:
		return bad(fmt.Sprintf("%d bytes long", len(id)))
	case !utf8.ValidString(id):
		return bad("not valid UTF-8")
	case id == "." || id == "..":
		return bad("a relative directory name")
	}
	for _, r := range id {
		switch {
		case r == '/' || r == '\\':
			return bad(fmt.Sprintf("holds the path separator %q", r))
		case r == '=':
			return bad("holds '=' (it is carried in KEY=value environment entries)")
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
			return bad(fmt.Sprintf("holds the control character %U", r))
		}
	}
	if strings.TrimSpace(id) != id {
		return bad("starts or ends with white space")
	}
	return nil
}

// IsLoopback reports whether host names only loopback addresses (an empty host means every interface).
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

// Validate checks what a node brings to a join; also applied by the server to every join it receives.
func (m *Member) Validate() error {
	if err := m.checkInstance(); err != nil {
		return err
	}
	if err := m.checkCounts(); err != nil {
		return err
	}
	if m.Host != "" {
		if why := hostProblem(m.Host); why != "" {
			return configError(setting.RendezvousHostName, m.Host, why)
		}
	}
	if m.RunID != "" {
		if err := ValidateRunID(m.RunID); err != nil {
			return err
		}
	}
	return nil
}

// checkInstance checks the member's instance id: 1..64 printable characters without '/'.
func (m *Member) checkInstance() error {
	switch {
	case m.Instance == "":
		return configError("instance", "", "a member needs an instance id; use NewInstance()")
	case len(m.Instance) > 64 || strings.ContainsFunc(m.Instance, func(r rune) bool { return r <= ' ' || r == '/' || r > '~' }):
		return configError("instance", m.Instance, "an instance id is at most 64 printable characters without '/'")
	}
	return nil
}

// checkCounts checks the member's numbers: its workers, generation, requested rank and slice.
func (m *Member) checkCounts() error {
	ref := m.Host
	if ref == "" {
		ref = m.Instance
	}
	switch {
	case m.LocalWorkers < 1:
		return newError(ErrConfig, fmt.Sprintf("member %s has %d local workers; need at least 1", ref, m.LocalWorkers))
	case m.Generation < LatestGeneration:
		return newError(ErrConfig, fmt.Sprintf("member %s has generation %d; need >= 0, or LatestGeneration", ref, m.Generation))
	case m.Rank < -1:
		return newError(ErrConfig, fmt.Sprintf("member %s requests node rank %d; use -1 for any", ref, m.Rank))
	case m.SliceID < 0 || m.NumSlices < 0 || (m.NumSlices > 0 && m.SliceID >= m.NumSlices):
		return newError(ErrConfig, fmt.Sprintf("member %s has slice id %d of %d slices", ref, m.SliceID, m.NumSlices))
	}
	return nil
}

// MaxNodes bounds the node count of one world.
const MaxNodes = 65536

// Backend is one kind of rendezvous: torchrun's static, tcp (c10d) and etcd, each a package under this one that
// registers itself (Register), and the world of one. It says what it asks of its caller and what it promises, so
// that a caller decides by asking it, never by its name. Lookup finds one by name; New opens the one Config.Backend
// names.
type Backend interface {
	// Solo reports whether the backend is the world of one: this node alone, known before any join, with no other
	// node and no store. Every join agrees at once, the barrier is open, the exchange returns what this node
	// published, and no other node can fail.
	Solo() bool
	// Elastic reports whether the backend forms its world from the nodes that arrive: it assigns their ranks, a
	// world may have MinNodes..NNodes nodes, and a node that comes late, comes back or replaces one joins with
	// LatestGeneration and waits for the world to restart. A backend that is not elastic has a fixed world that
	// its caller lays out: the node count and each node's rank (static: and node 0's endpoint, torchrun's
	// --master-addr) come with the launch or the host list, and every node joins generation 0.
	Elastic() bool
	// NeedsHosts reports whether cfg leaves to the job's host list (Config.Hosts) something the backend needs:
	// static, this node's rank when it is not given, or node 0's endpoint; tcp, node 0's endpoint for a world of
	// several nodes without one.
	NeedsHosts(cfg *Config) bool

	// The methods below are for Rendezvous, not for its callers: they ask them of the Rendezvous.

	// NamesNodes reports whether, under cfg, Join names a member without a host after its entry in the host list
	// (static without an endpoint).
	NamesNodes(cfg *Config) bool
	// HostsServer reports whether the nodes meet on the embedded server (static, tcp), whose token is theirs.
	HostsServer() bool
	// Port is the port an endpoint given without one gets.
	Port() int
	// Open prepares the backend under cfg (which it may complete: a static world's node count) and returns the
	// store a Rendezvous joins through. linger: how long a closed job stays learnable after its last node (the
	// hosted server waits for connected nodes that long at most; etcd keeps the job's keys that long).
	Open(ctx context.Context, cfg *Config, log *zap.Logger, linger time.Duration) (Store, error)
}

// Store is an open backend: what a Rendezvous enters each generation through. A backend implements it; callers
// use Rendezvous.
type Store interface {
	// Join enters one generation with m, completed and checked by Rendezvous.Join.
	Join(ctx context.Context, m Member, log *zap.Logger) (Session, error)
	// Endpoint is the address of the server this node talks to (tcp, static), or the etcd endpoints.
	Endpoint() string
	// Hosts is the host list that names the nodes by rank, when the store has one (static).
	Hosts() []string
	// Close releases the store (see Rendezvous.Close).
	Close() error
}

// Registration is one backend as it registers itself: its name, torchrun's other names for it, and the backend.
type Registration struct {
	Name    string
	Aliases []string
	Backend Backend
}

var registry = struct {
	sync.RWMutex
	byName map[string]Backend // names and aliases; "" is the world of one
	list   []Registration     // sorted by Name
}{byName: map[string]Backend{"": soloBackend{}}}

// Register adds a backend under its name and aliases and returns it: each backend package registers itself in a
// package-level declaration (var _ = rendezvous.Register(...)), run when a program links it, and the launcher
// imports the backends it links (internal/host/host.go). A name taken twice panics: a programming error.
func Register(r Registration) Backend {
	registry.Lock()
	defer registry.Unlock()
	names := append([]string{r.Name}, r.Aliases...)
	for _, n := range names {
		if _, dup := registry.byName[n]; dup {
			panic(fmt.Sprintf("rendezvous: backend %q registered twice", n))
		}
	}
	for _, n := range names {
		registry.byName[n] = r.Backend
	}
	r.Aliases = slices.Clone(r.Aliases)
	i, _ := slices.BinarySearchFunc(registry.list, r.Name, func(x Registration, n string) int { return strings.Compare(x.Name, n) })
	registry.list = slices.Insert(registry.list, i, r)
	return r.Backend
}

// Backends are the registered backends, by name.
func Backends() []Registration {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Clone(registry.list)
}

// Names says the registered backends in words, for help text and messages: "etcd (etcd-v2), static or tcp (c10d)".
func Names() string {
	var names []string
	for _, r := range Backends() {
		n := r.Name
		if len(r.Aliases) > 0 {
			n += " (" + strings.Join(r.Aliases, ", ") + ")"
		}
		names = append(names, n)
	}
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Lookup is the backend named name, a registered name or alias (Backends), or "" for the world of one. An unknown
// name is an *Error matching ErrConfig with Field "rendezvous backend" whose message names the registered backends,
// and, for one of tpurun's backends that the program did not link, the package to import: `backend "tcp":
// unknown; import _ "tpurun/rendezvous/tcp" to register it (registered: none)`.
func Lookup(name string) (Backend, error) {
	registry.RLock()
	b, ok := registry.byName[name]
	registry.RUnlock()
	if ok {
		return b, nil
	}
	if pkg, ok := backendPackages[name]; ok {
		return nil, configError(setting.RendezvousBackend, name, fmt.Sprintf("unknown; import _ %q to register it (registered: %s)", pkg, Names()))
	}
	if len(Backends()) == 0 {
		return nil, configError(setting.RendezvousBackend, name, `unknown, and no backend is registered: import one (_ "tpurun/rendezvous/tcp", static or etcd)`)
	}
	return nil, configError(setting.RendezvousBackend, name, "unknown; use "+Names())
}

// backendPackages are tpurun's backends by their names and aliases: the package that registers each, which a
// program imports to link it.
var backendPackages = map[string]string{
	"static": "tpurun/rendezvous/static",
	"tcp":    "tpurun/rendezvous/tcp", "c10d": "tpurun/rendezvous/tcp",
	"etcd": "tpurun/rendezvous/etcd", "etcd-v2": "tpurun/rendezvous/etcd",
}

// soloBackend is the world of one (Config.Backend ""): this node alone. It has no store: every generation agrees at
// once on the member as given, the barrier is open, the exchange returns what this node published, and no other
// node can fail.
type soloBackend struct{}

func (soloBackend) Solo() bool              { return true }
func (soloBackend) Elastic() bool           { return false }
func (soloBackend) NeedsHosts(*Config) bool { return false }
func (soloBackend) NamesNodes(*Config) bool { return false }
func (soloBackend) HostsServer() bool       { return false }
func (soloBackend) Port() int               { return DefaultPort }

// Open refuses a world of more than one node; there is nothing to prepare.
func (soloBackend) Open(_ context.Context, cfg *Config, _ *zap.Logger, _ time.Duration) (Store, error) {
	if cfg.NNodes > 1 {
		return nil, configError(setting.RendezvousNodes, strconv.Itoa(cfg.NNodes), "a world of one node; name a backend ("+Names()+") for more")
	}
	if cfg.NodeRank > 0 {
		return nil, configError(setting.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), "a world of one node has only node rank 0")
	}
	return soloStore{}, nil
}

// soloStore joins the world of one.
type soloStore struct{}

func (soloStore) Join(_ context.Context, m Member, _ *zap.Logger) (Session, error) {
	asg := &Assignment{NodeRank: 0, RunID: m.RunID, Generation: m.Generation, Accelerator: m.Accelerator,
		NNodes: 1, WorldSize: m.LocalWorkers, NumSlices: 1, Layout: []Span{{Nodes: 1, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}},
		Nodes: []Node{{Rank: 0, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}}}
	return &soloSession{asg: asg, published: map[string][]byte{}, failures: make(chan Failure), done: make(chan struct{})}, nil
}

func (soloStore) Endpoint() string { return "" }
func (soloStore) Hosts() []string  { return nil }
func (soloStore) Close() error     { return nil }

// soloSession is one generation of the world of one.
type soloSession struct {
	asg       *Assignment
	mu        sync.Mutex
	published map[string][]byte
	failures  chan Failure
	done      chan struct{}
	closeOnce sync.Once
}

func (s *soloSession) Assignment() *Assignment               { return s.asg.Clone() }
func (s *soloSession) Barrier(context.Context, string) error { return nil }
func (s *soloSession) Fail(context.Context, Failure) error   { return nil }
func (s *soloSession) Failures() <-chan Failure              { return s.failures }
func (s *soloSession) Waiting(context.Context) (int, error)  { return 0, nil }
func (s *soloSession) Finish(context.Context, int) error     { return nil }
func (s *soloSession) Leave(context.Context) error           { return nil }
func (s *soloSession) Done() <-chan struct{}                 { return s.done }

func (s *soloSession) Publish(_ context.Context, key string, data []byte) error {
	s.mu.Lock()
	s.published[key] = data
	s.mu.Unlock()
	return nil
}

func (s *soloSession) Gather(_ context.Context, key string) (map[int][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[int][]byte{0: s.published[key]}, nil
}

func (s *soloSession) Err() error {
	select {
	case <-s.done:
		return newError(ErrClosed, "session closed")
	default:
		return nil
	}
}

func (s *soloSession) Close() error {
	s.closeOnce.Do(func() {
		close(s.failures)
		close(s.done)
	})
	return nil
}
