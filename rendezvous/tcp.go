package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// staticBackend is torchrun's static rendezvous: a fixed world laid out by the launch (node count, node ranks
// and, without an endpoint, node 0's host from the host list), met on the embedded server that node 0 hosts.
type staticBackend struct{}

func (staticBackend) Solo() bool        { return false }
func (staticBackend) Elastic() bool     { return false }
func (staticBackend) port() int         { return DefaultPort }
func (staticBackend) hostsServer() bool { return true }

func (staticBackend) NeedsHosts(cfg *Config) bool { return cfg.NodeRank < 0 || cfg.Endpoint == "" }

func (staticBackend) namesNodes(cfg *Config) bool { return cfg.Endpoint == "" }

func (staticBackend) open(ctx context.Context, r *Rendezvous, linger time.Duration) error {
	t, err := newStatic(ctx, &r.cfg, r.log)
	if err != nil {
		return err
	}
	t.attach(r, linger)
	return nil
}

// tcpBackend is torchrun's c10d rendezvous: an elastic world met on the embedded server at the endpoint, hosted
// by the node that can bind it (or the one told to).
type tcpBackend struct{}

func (tcpBackend) Solo() bool              { return false }
func (tcpBackend) Elastic() bool           { return true }
func (tcpBackend) namesNodes(*Config) bool { return false }
func (tcpBackend) port() int               { return DefaultPort }
func (tcpBackend) hostsServer() bool       { return true }

func (tcpBackend) NeedsHosts(cfg *Config) bool { return cfg.Endpoint == "" && cfg.NNodes != 1 }

func (tcpBackend) open(ctx context.Context, r *Rendezvous, linger time.Duration) error {
	t, err := newTCP(ctx, &r.cfg, r.log)
	if err != nil {
		return err
	}
	t.attach(r, linger)
	return nil
}

// tcpStore is the client of the embedded server, for the static and tcp backends; on the node that hosts the
// server it owns it.
type tcpStore struct {
	cfg      *Config
	log      *zap.Logger
	endpoint string
	hosts    []string // the static host list, when known
	hostsSum string   // its sum (hostsSum), which joins carry instead
	server   *Server
	linger   time.Duration
}

// attach makes t the store of r.
func (t *tcpStore) attach(r *Rendezvous, linger time.Duration) {
	t.linger = linger
	r.store, r.endpoint, r.hosts, r.server = t, t.endpoint, t.hosts, t.server
}

// newStatic prepares the static backend: node rank and host list from cfg or the environment; node 0 hosts the
// server.
func newStatic(ctx context.Context, c *Config, log *zap.Logger) (*tcpStore, error) {
	if err := staticWorld(c); err != nil {
		return nil, err
	}
	t := &tcpStore{cfg: c, log: log, hosts: c.Hosts, hostsSum: hostsSum(c.Hosts), endpoint: c.Endpoint}
	if t.endpoint == "" {
		if len(t.hosts) == 0 {
			return nil, configError(FieldEndpoint, "", "static rendezvous without a host list needs an endpoint (node 0's host:port)")
		}
		t.endpoint = net.JoinHostPort(t.hosts[0], portOption(c))
	}
	if err := t.checkEndpoint(c.NodeRank == 0 && c.NNodes == 1); err != nil {
		return nil, err
	}
	if c.NodeRank == 0 {
		if err := t.host(ctx, true); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// staticWorld checks the fixed world of a static rendezvous and completes it: this node's rank, the node count
// (from the host list when 0) and no smaller minimum.
func staticWorld(c *Config) error {
	if c.MinNodes != 0 && c.MinNodes != c.NNodes {
		return configError(FieldMinNodes, strconv.Itoa(c.MinNodes), "the static backend has a fixed node count; use tcp or etcd for an elastic world")
	}
	hosts := c.Hosts
	if c.NodeRank < 0 {
		return configError(FieldNodeRank, "", "a static rendezvous needs this node's rank (TPU_WORKER_ID, SLURM_NODEID or JOB_COMPLETION_INDEX give it to tpurun)")
	}
	if len(hosts) > 0 {
		if c.NNodes == 0 {
			c.NNodes = len(hosts)
		}
		if c.NNodes != len(hosts) {
			return configError(FieldNodes, strconv.Itoa(c.NNodes), fmt.Sprintf("the host list has %d hosts (%s)", len(hosts), strings.Join(hosts, ",")))
		}
	}
	if c.NNodes == 0 {
		return newError(ErrConfig, "static rendezvous needs a node count or a host list (tpurun takes one from TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or the hosts option)")
	}
	if c.NodeRank >= c.NNodes {
		return configError(FieldNodeRank, strconv.Itoa(c.NodeRank), fmt.Sprintf("there are %d nodes", c.NNodes))
	}
	c.MinNodes = c.NNodes
	return nil
}

// portOption is the port of an endpoint taken from the host list: the port option, default DefaultPort.
func portOption(c *Config) string {
	if p := c.Conf["port"]; p != "" {
		return p
	}
	return strconv.Itoa(DefaultPort)
}

// newTCP prepares the tcp backend: the endpoint, and the server on the node that hosts it.
func newTCP(ctx context.Context, c *Config, log *zap.Logger) (*tcpStore, error) {
	if c.NNodes < 1 {
		return nil, configError(FieldNodes, "0", "tcp rendezvous needs a node count")
	}
	isHost := c.Conf["is_host"]
	switch isHost {
	case "true", "1", "false", "0", "", "auto":
	default:
		return nil, configError(FieldOption, "is_host="+isHost, "use true, false or auto")
	}
	t := &tcpStore{cfg: c, log: log, endpoint: c.Endpoint}
	if t.endpoint == "" {
		ep, err := t.defaultEndpoint()
		if err != nil {
			return nil, err
		}
		t.endpoint = ep
	}
	hosting := isHost == "true" || isHost == "1"
	if err := t.checkEndpoint(hosting || c.NNodes == 1 && isHost != "false" && isHost != "0"); err != nil {
		return nil, err
	}
	switch isHost {
	case "true", "1":
		return t, t.host(ctx, true)
	case "false", "0":
		return t, nil
	}
	return t, t.host(ctx, false)
}

// checkEndpoint checks the endpoint before anything is bound or dialled: host:port with a port in range (0 only
// where zeroOK: this node hosts and nobody else needs to find the port), and a token unless it is loopback.
func (t *tcpStore) checkEndpoint(zeroOK bool) error {
	host, _, err := splitEndpoint(FieldEndpoint, t.endpoint, zeroOK)
	if err != nil {
		return err
	}
	if t.cfg.Token == "" && !isLoopback(host) && !t.cfg.AllowUnauthenticated {
		return &Error{Kind: ErrNoToken, Field: FieldEndpoint, Value: t.endpoint,
			Detail: "not a loopback address, and there is no token (Config.Token): the rendezvous would be open to anyone who can reach it"}
	}
	if t.cfg.Listen != "" {
		if _, _, err := splitEndpoint(FieldListen, t.cfg.Listen, true); err != nil {
			return err
		}
	}
	return nil
}

// defaultEndpoint is the endpoint of a tcp rendezvous without one, on the port option (default DefaultPort):
// loopback for one node; for several, host 0 of a host list that names every node (Config.Hosts). Anything else is a configuration error: a loopback default
// would have every node host a private server and wait out the timeout alone.
func (t *tcpStore) defaultEndpoint() (string, error) {
	port := portOption(t.cfg)
	if t.cfg.NNodes == 1 {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	need := fmt.Sprintf("tcp rendezvous of %d nodes needs an endpoint (node 0's host:port)", t.cfg.NNodes)
	hosts := t.cfg.Hosts
	switch {
	case len(hosts) == 0:
		return "", configError(FieldEndpoint, "", need+", or a host list naming every node (TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or the hosts option)")
	case len(hosts) != t.cfg.NNodes:
		return "", configError(FieldEndpoint, "", fmt.Sprintf("%s: the host list has %d hosts, not %d, so its first host need not be node 0",
			need, len(hosts), t.cfg.NNodes))
	}
	t.log.Debug("tcp rendezvous endpoint from the host list", zap.String("host", hosts[0]))
	return net.JoinHostPort(hosts[0], port), nil
}

// host starts the embedded server on the endpoint (or cfg.Listen), waiting for its host name to resolve (within the
// join timeout) when it does not yet. When must is false, a failure to bind because the address is taken or not
// local means another node hosts it.
func (t *tcpStore) host(ctx context.Context, must bool) error {
	c := t.cfg
	addr := c.Listen
	if addr == "" {
		addr = t.endpoint
	}
	who := "the node whose address it is hosts the rendezvous server there"
	if must {
		who = "this node hosts the rendezvous server there"
	}
	addr, err := resolved(ctx, t.resolver(), addr, c.Timeout, who, t.log)
	if err != nil {
		return err
	}
	s, err := Listen(ServerConfig{Addr: addr, Token: c.Token, AllowUnauthenticated: c.AllowUnauthenticated, Heartbeat: c.Heartbeat, Timeout: c.Timeout,
		MaxMessage: c.MaxMessage, MaxConns: c.MaxConns, MaxUnauth: c.MaxUnauth, AuthTimeout: c.AuthTimeout, Hosts: t.hosts, Logger: c.Logger})
	if err != nil {
		if !must && (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
			t.log.Debug("rendezvous server hosted elsewhere", zap.String("endpoint", t.endpoint), zap.Error(err))
			return nil
		}
		return err
	}
	t.server = s
	if c.Listen != "" && c.Endpoint == "" {
		t.endpoint = s.Addr()
	}
	if _, port, _ := net.SplitHostPort(t.endpoint); port == "0" {
		t.endpoint = s.Addr()
	}
	t.log.Info("rendezvous server started", zap.String("addr", s.Addr()))
	return nil
}

// join enters one generation through the embedded server.
func (t *tcpStore) join(ctx context.Context, m Member, log *zap.Logger) (Session, error) {
	deadline := time.Now().Add(t.cfg.Timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := dial(dctx, t.resolver(), t.endpoint, t.cfg.Token, t.cfg.Heartbeat, maxOr(t.cfg.MaxMessage), log)
	if err != nil {
		return nil, err
	}
	req := &message{Type: msgJoin, Member: &m, NNodes: t.cfg.NNodes, HostsSum: t.hostsSum}
	if t.cfg.MinNodes != t.cfg.NNodes {
		req.MinNodes, req.LastCallMS = t.cfg.MinNodes, max(t.cfg.LastCall.Milliseconds(), 1)
	}
	resp, err := c.call(ctx, req, time.Until(deadline))
	if err == nil && resp.Assignment == nil {
		err = newError(ErrProtocol, "join reply without an assignment")
	}
	if err != nil {
		c.close()
		return nil, err
	}
	log.Info("rendezvous joined", zap.Int("node_rank", resp.Assignment.NodeRank), zap.Int("nnodes", resp.Assignment.NNodes),
		zap.Int("generation", resp.Assignment.Generation))
	return &tcpSession{c: c, timeout: t.cfg.Timeout, asg: resp.Assignment, hosts: t.hosts}, nil
}

func (t *tcpStore) resolver() *net.Resolver {
	if t.cfg.Resolver != nil {
		return t.cfg.Resolver
	}
	return net.DefaultResolver
}

func maxOr(n int) int {
	if n <= 0 {
		return DefaultMaxMessage
	}
	return n
}

// close stops a hosted server, first waiting (up to the linger time) for the other nodes to leave, so they can
// finish reading the verdict.
func (t *tcpStore) close() error {
	if t.server == nil {
		return nil
	}
	t.server.Drain(t.linger)
	return t.server.Close()
}

// tcpSession is one generation on the embedded server.
type tcpSession struct {
	c       *client
	timeout time.Duration
	asg     *Assignment // the share as received
	hosts   []string    // names its nodes when the share leaves them out (nameFrom)
}

// Assignment is the share received, its nodes named from the host list when the share left them out: a node of a
// pod of 4096 hosts receives a few hundred bytes and names its slice's hosts here, when they are needed.
func (t *tcpSession) Assignment() *Assignment {
	a := t.asg.clone()
	a.nameFrom(t.hosts)
	return a
}

func (t *tcpSession) Barrier(ctx context.Context, name string) error {
	_, err := t.c.call(ctx, &message{Type: msgBarrier, Name: name}, t.timeout)
	return err
}

func (t *tcpSession) Publish(ctx context.Context, key string, data []byte) error {
	_, err := t.c.call(ctx, &message{Type: msgPublish, Name: key, Data: data}, t.timeout)
	return err
}

func (t *tcpSession) Gather(ctx context.Context, key string) (map[int][]byte, error) {
	r, err := t.c.call(ctx, &message{Type: msgGather, Name: key}, t.timeout)
	if err != nil {
		return nil, err
	}
	if r.Gathered == nil {
		r.Gathered = map[int][]byte{}
	}
	return r.Gathered, nil
}

func (t *tcpSession) Fail(ctx context.Context, f Failure) error {
	f = f.stamped()
	_, err := t.c.call(ctx, &message{Type: msgFail, Failure: &f}, t.timeout)
	return err
}

func (t *tcpSession) Leave(ctx context.Context) error {
	_, err := t.c.call(ctx, &message{Type: msgLeave}, t.timeout)
	if err == nil {
		t.c.mu.Lock()
		t.c.left = true
		t.c.mu.Unlock()
	}
	return err
}

func (t *tcpSession) Waiting(ctx context.Context) (int, error) {
	r, err := t.c.call(ctx, &message{Type: msgWaiting}, t.timeout)
	if err != nil {
		return 0, err
	}
	return r.Waiting, nil
}

func (t *tcpSession) Finish(ctx context.Context, code int) error {
	_, err := t.c.call(ctx, &message{Type: msgFinish, ExitCode: code}, t.timeout)
	return err
}

func (t *tcpSession) Failures() <-chan Failure { return t.c.failures }

func (t *tcpSession) Done() <-chan struct{} { return t.c.done }

func (t *tcpSession) Err() error {
	select {
	case <-t.c.done:
		return t.c.connErr()
	default:
		return nil
	}
}

func (t *tcpSession) Close() error {
	t.c.close()
	return nil
}
