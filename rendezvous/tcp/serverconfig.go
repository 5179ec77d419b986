package tcp

import (
	"time"

	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/progress"
)

// ServerConfig configures the embedded rendezvous server.
type ServerConfig struct {
	// Addr is the listen address, host:port. Empty means 127.0.0.1 on a free port. A host that is not loopback
	// (including an empty host, which means every interface) requires Token.
	Addr string
	// Token, when set, must be proved by every connection in the handshake (never sent, never logged).
	Token string
	// AllowUnauthenticated lets a server without a Token listen off loopback (Config.AllowUnauthenticated).
	AllowUnauthenticated bool
	// Heartbeat: a client silent rendezvous.SilentBeats heartbeats is dropped and reported lost. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// AuthTimeout: a connection must complete the handshake this soon after it is accepted, or it is dropped.
	// Default DefaultAuthTimeout.
	AuthTimeout time.Duration
	// Timeout is used for requests that carry none. Default DefaultTimeout.
	Timeout time.Duration
	// MaxMessage bounds one message in bytes. Default DefaultMaxMessage.
	MaxMessage int
	// MaxConns bounds the authenticated connections (one per node and generation); a node beyond it is told the
	// server is full and retries. Default DefaultMaxConns.
	MaxConns int
	// MaxUnauth bounds the connections still in the handshake. A connection accepted when it is reached evicts
	// the oldest one whose peer has been silent for EvictGrace and has sent nothing (else the oldest silent one):
	// idle connections cannot lock a node out, since a node sends its hello at once and completes the handshake in
	// one round trip. Default DefaultMaxUnauth.
	MaxUnauth int
	// EvictGrace is how long a pending connection whose peer keeps the server waiting (with nothing sent) is safe
	// from eviction by a newer one; a handshake waiting for the server itself (a loaded server) is never evicted,
	// and one whose peer has sent its hello gets four times the server's lag more (at most AuthTimeout/2).
	// Default AuthTimeout/4, at most 100 ms: a flood of silent connections cannot churn the pool faster than
	// MaxUnauth per grace, and a real node answers within one round trip.
	EvictGrace time.Duration
	// WarnInterval: refused connections are logged as one summary line (with counts) per interval at most.
	// Default DefaultWarnInterval.
	WarnInterval time.Duration
	// Hosts is the job's host list in node order, when the node hosting the server knows one (Config.Hosts): a
	// join carries only its sum (hostsSum), and a join that times out names the hosts of the ranks that never
	// arrived when the joiners' list is this one.
	Hosts []string
	// Progress: while a world forms, who has arrived and who is missing are logged once per Progress. Default
	// 5 s (the option progress_interval).
	Progress time.Duration
	Logger   *zap.Logger
}

// Server defaults.
const (
	DefaultAuthTimeout = 5 * time.Second
	// DefaultMaxConns is room for a job of 256 slices of 64 hosts (16,384) twice over: each node's connection to a
	// generation and to the next, which it opens before it closes the old one, and nodes waiting for a restart.
	DefaultMaxConns     = 32768
	DefaultMaxUnauth    = 64
	DefaultWarnInterval = 10 * time.Second
)

func (c *ServerConfig) defaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = rendezvous.DefaultHeartbeat
	}
	if c.AuthTimeout <= 0 {
		c.AuthTimeout = DefaultAuthTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = rendezvous.DefaultTimeout
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxUnauth <= 0 {
		c.MaxUnauth = DefaultMaxUnauth
	}
	if c.EvictGrace <= 0 {
		c.EvictGrace = min(c.AuthTimeout/4, graceMax)
	}
	if c.Progress <= 0 {
		c.Progress = progress.Default
	}
	if c.WarnInterval <= 0 {
		c.WarnInterval = DefaultWarnInterval
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// graceMax bounds the default EvictGrace.
const graceMax = 100 * time.Millisecond
