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

// tcpBackend is the client of the embedded server, for the static and tcp backends; on the node that hosts the
// server it owns it.
type tcpBackend struct {
	cfg      *Config
	log      *zap.Logger
	endpoint string
	hosts    []string // the static host list, when known
	server   *Server
	linger   time.Duration
}

// newStatic prepares the static backend: node rank and host list from cfg or the environment; node 0 hosts the
// server.
func newStatic(c *Config, log *zap.Logger) (*tcpBackend, error) {
	if c.MinNodes != 0 && c.MinNodes != c.NNodes {
		return nil, configError(FieldMinNodes, strconv.Itoa(c.MinNodes), "the static backend has a fixed node count; use tcp or etcd for an elastic world")
	}
	hosts := c.Hosts
	if c.NodeRank < 0 {
		return nil, configError(FieldNodeRank, "", "a static rendezvous needs this node's rank (TPU_WORKER_ID, SLURM_NODEID or JOB_COMPLETION_INDEX give it to tpurun)")
	}
	if len(hosts) > 0 {
		if c.NNodes == 0 {
			c.NNodes = len(hosts)
		}
		if c.NNodes != len(hosts) {
			return nil, configError(FieldNodes, strconv.Itoa(c.NNodes), fmt.Sprintf("the host list has %d hosts (%s)", len(hosts), strings.Join(hosts, ",")))
		}
	}
	if c.NNodes == 0 {
		return nil, newError(ErrConfig, "static rendezvous needs a node count or a host list (tpurun takes one from TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or the hosts option)")
	}
	if c.NodeRank >= c.NNodes {
		return nil, configError(FieldNodeRank, strconv.Itoa(c.NodeRank), fmt.Sprintf("there are %d nodes", c.NNodes))
	}
	c.MinNodes = c.NNodes
	t := &tcpBackend{cfg: c, log: log, hosts: hosts, endpoint: c.Endpoint}
	if t.endpoint == "" {
		if len(hosts) == 0 {
			return nil, configError(FieldEndpoint, "", "static rendezvous without a host list needs an endpoint (node 0's host:port)")
		}
		port := c.Conf["port"]
		if port == "" {
			port = strconv.Itoa(DefaultPort)
		}
		t.endpoint = net.JoinHostPort(hosts[0], port)
	}
	if err := t.checkEndpoint(c.NodeRank == 0 && c.NNodes == 1); err != nil {
		return nil, err
	}
	if c.NodeRank == 0 {
		if err := t.host(true); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// newTCP prepares the tcp backend: the endpoint, and the server on the node that hosts it.
func newTCP(c *Config, log *zap.Logger) (*tcpBackend, error) {
	if c.NNodes < 1 {
		return nil, configError(FieldNodes, "0", "tcp rendezvous needs a node count")
	}
	isHost := c.Conf["is_host"]
	switch isHost {
	case "true", "1", "false", "0", "", "auto":
	default:
		return nil, configError(FieldOption, "is_host="+isHost, "use true, false or auto")
	}
	t := &tcpBackend{cfg: c, log: log, endpoint: c.Endpoint}
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
		return t, t.host(true)
	case "false", "0":
		return t, nil
	}
	return t, t.host(false)
}

// checkEndpoint checks the endpoint before anything is bound or dialled: host:port with a port in range (0 only
// where zeroOK: this node hosts and nobody else needs to find the port), and a token unless it is loopback.
func (t *tcpBackend) checkEndpoint(zeroOK bool) error {
	host, _, err := splitEndpoint(FieldEndpoint, t.endpoint, zeroOK)
	if err != nil {
		return err
	}
	if t.cfg.Token == "" && !isLoopback(host) {
		return &Error{Kind: ErrNoToken, Field: FieldEndpoint, Value: t.endpoint,
			Detail: "not a loopback address, and there is no token: the rendezvous would be open to anyone who can reach it; give every node the same token"}
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
func (t *tcpBackend) defaultEndpoint() (string, error) {
	port := t.cfg.Conf["port"]
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	}
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

// host starts the embedded server on the endpoint (or cfg.Listen). When must is false, a failure to bind
// because the address is taken or not local means another node hosts it.
func (t *tcpBackend) host(must bool) error {
	c := t.cfg
	addr := c.Listen
	if addr == "" {
		addr = t.endpoint
	}
	s, err := Listen(ServerConfig{Addr: addr, Token: c.Token, Heartbeat: c.Heartbeat, Timeout: c.Timeout,
		MaxMessage: c.MaxMessage, MaxConns: c.MaxConns, MaxUnauth: c.MaxUnauth, AuthTimeout: c.AuthTimeout, Logger: c.Logger})
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
func (t *tcpBackend) join(ctx context.Context, m Member, log *zap.Logger) (membership, *Assignment, error) {
	deadline := time.Now().Add(t.cfg.Timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := dial(dctx, t.endpoint, t.cfg.Token, t.cfg.Heartbeat, maxOr(t.cfg.MaxMessage), log)
	if err != nil {
		return nil, nil, err
	}
	req := &message{Type: msgJoin, Member: &m, NNodes: t.cfg.NNodes, Hosts: t.hosts}
	if t.cfg.MinNodes != t.cfg.NNodes {
		req.MinNodes, req.LastCallMS = t.cfg.MinNodes, max(t.cfg.LastCall.Milliseconds(), 1)
	}
	resp, err := c.call(ctx, req, time.Until(deadline))
	if err == nil && resp.Assignment == nil {
		err = newError(ErrProtocol, "join reply without an assignment")
	}
	if err != nil {
		c.close()
		return nil, nil, err
	}
	log.Info("rendezvous joined", zap.Int("node_rank", resp.Assignment.NodeRank), zap.Int("nnodes", len(resp.Assignment.Nodes)),
		zap.Int("generation", resp.Assignment.Generation))
	return &tcpSession{c: c, timeout: t.cfg.Timeout}, resp.Assignment, nil
}

func maxOr(n int) int {
	if n <= 0 {
		return DefaultMaxMessage
	}
	return n
}

// close stops a hosted server, first waiting (up to the linger time) for the other nodes to leave, so they can
// finish reading the verdict.
func (t *tcpBackend) close() error {
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
}

func (t *tcpSession) barrier(ctx context.Context, name string) error {
	_, err := t.c.call(ctx, &message{Type: msgBarrier, Name: name}, t.timeout)
	return err
}

func (t *tcpSession) publish(ctx context.Context, key string, data []byte) error {
	_, err := t.c.call(ctx, &message{Type: msgPublish, Name: key, Data: data}, t.timeout)
	return err
}

func (t *tcpSession) gather(ctx context.Context, key string) (map[int][]byte, error) {
	r, err := t.c.call(ctx, &message{Type: msgGather, Name: key}, t.timeout)
	if err != nil {
		return nil, err
	}
	if r.Gathered == nil {
		r.Gathered = map[int][]byte{}
	}
	return r.Gathered, nil
}

func (t *tcpSession) fail(ctx context.Context, f Failure) error {
	_, err := t.c.call(ctx, &message{Type: msgFail, Failure: &f}, t.timeout)
	return err
}

func (t *tcpSession) leave(ctx context.Context) error {
	_, err := t.c.call(ctx, &message{Type: msgLeave}, t.timeout)
	if err == nil {
		t.c.mu.Lock()
		t.c.left = true
		t.c.mu.Unlock()
	}
	return err
}

func (t *tcpSession) waiting(ctx context.Context) (int, error) {
	r, err := t.c.call(ctx, &message{Type: msgWaiting}, t.timeout)
	if err != nil {
		return 0, err
	}
	return r.Waiting, nil
}

func (t *tcpSession) finish(ctx context.Context, code int) error {
	_, err := t.c.call(ctx, &message{Type: msgFinish, ExitCode: code}, t.timeout)
	return err
}

func (t *tcpSession) failures() <-chan Failure { return t.c.failures }

func (t *tcpSession) done() <-chan struct{} { return t.c.done }

func (t *tcpSession) err() error {
	select {
	case <-t.c.done:
		return t.c.connErr()
	default:
		return nil
	}
}

func (t *tcpSession) close() error {
	t.c.close()
	return nil
}
