package rendezvous

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"tpurun/internal/failure"
)

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
	// not resolve yet is waited for within Timeout.
	Resolver *net.Resolver
	Logger   *zap.Logger
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
		return configError(failure.RendezvousNodes, strconv.Itoa(cfg.NNodes), fmt.Sprintf("need 1..%d", MaxNodes))
	}
	if cfg.MinNodes < 0 || cfg.MinNodes > cfg.NNodes {
		return configError(failure.RendezvousMinNodes, strconv.Itoa(cfg.MinNodes), fmt.Sprintf("need 1..%d (the node count), or 0 for a fixed size", cfg.NNodes))
	}
	if cfg.MinNodes == 0 {
		cfg.MinNodes = cfg.NNodes
	}
	if cfg.NodeRank < -1 || (cfg.NNodes > 0 && cfg.NodeRank >= cfg.NNodes) {
		return configError(failure.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("need -1 (any) or 0..%d for %d nodes", cfg.NNodes-1, cfg.NNodes))
	}
	if cfg.MinNodes < cfg.NNodes && cfg.NodeRank >= cfg.MinNodes {
		return configError(failure.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), fmt.Sprintf("an elastic world of %d..%d nodes may have only %d: request a rank below %d, or none",
			cfg.MinNodes, cfg.NNodes, cfg.MinNodes, cfg.MinNodes))
	}
	return nil
}

// MaxRunID is the longest run id accepted, in bytes.
const MaxRunID = 128

// ValidateRunID checks a run id: it names etcd keys and directories and travels in environment entries, so it
// must be 1..MaxRunID bytes of UTF-8 without '/', '\', '=', control or format characters, leading or trailing
// white space, and not "." or "..". The error is an *Error matching ErrConfig with Field
// "rendezvous run id".
func ValidateRunID(id string) error {
	bad := func(why string) error {
		return configError(failure.RendezvousRunID, id, why+"; use letters, digits and -_.:@+ (at most "+strconv.Itoa(MaxRunID)+" bytes)")
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

// MaxNodes bounds the node count of one world.
const MaxNodes = 65536
