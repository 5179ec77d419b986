package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
	"tpurun/rendezvous/internal/progress"
)

// Name is the backend's name (Config.Backend); torchrun calls it c10d.
const Name = "tcp"

// The backend registers itself when a program links the package.
var _ = rendezvous.Register(rendezvous.Registration{Name: Name, Aliases: []string{"c10d"}, Backend: backend{}})

// backend is torchrun's c10d rendezvous: an elastic world met on the embedded server at the endpoint, hosted
// by the node that can bind it (or the one told to).
type backend struct{}

func (backend) Solo() bool                         { return false }
func (backend) Elastic() bool                      { return true }
func (backend) NamesNodes(*rendezvous.Config) bool { return false }
func (backend) Port() int                          { return rendezvous.DefaultPort }
func (backend) HostsServer() bool                  { return true }

func (backend) NeedsHosts(cfg *rendezvous.Config) bool { return cfg.Endpoint == "" && cfg.NNodes != 1 }

func (backend) Open(ctx context.Context, cfg *rendezvous.Config, log *zap.Logger, linger time.Duration) (rendezvous.Store, error) {
	t, err := newTCP(ctx, cfg, log, linger)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Store is the client of the embedded server, for the tcp backend and the static one (package static); on the
// node that hosts the server it owns it.
type Store struct {
	cfg      *rendezvous.Config
	log      *zap.Logger
	endpoint string
	hosts    []string // the static host list, when known
	hostsSum string   // its sum (HostsSum), which joins carry instead
	server   *Server
	linger   time.Duration
}

// NewStore is the store of a backend that meets on the embedded server at endpoint, under cfg: hosts, when known,
// names the nodes by rank (a static world); linger is how long a hosted server waits for connected nodes at close.
// Nothing is bound or dialled yet (CheckEndpoint, Host).
func NewStore(cfg *rendezvous.Config, log *zap.Logger, endpoint string, hosts []string, linger time.Duration) *Store {
	return &Store{cfg: cfg, log: log, endpoint: endpoint, hosts: hosts, hostsSum: agree.HostsSum(hosts), linger: linger}
}

// Endpoint is the address of the server this node talks to.
func (t *Store) Endpoint() string { return t.endpoint }

// Hosts is the host list that names the nodes by rank, when known (static).
func (t *Store) Hosts() []string { return t.hosts }

// Server is the embedded server this node hosts, or nil.
func (t *Store) Server() *Server { return t.server }

// HostedServer is the embedded server r's node hosts, or nil (r not on this backend or static, or not hosting).
func HostedServer(r *rendezvous.Rendezvous) *Server {
	if t, ok := r.Store().(*Store); ok {
		return t.server
	}
	return nil
}

// newTCP prepares the tcp backend: the endpoint, and the server on the node that hosts it.
func newTCP(ctx context.Context, c *rendezvous.Config, log *zap.Logger, linger time.Duration) (*Store, error) {
	if c.NNodes < 1 {
		return nil, agree.ConfigError(failure.RendezvousNodes, "0", "tcp rendezvous needs a node count")
	}
	isHost := c.Conf["is_host"]
	switch isHost {
	case "true", "1", "false", "0", "", "auto":
	default:
		return nil, agree.ConfigError(failure.RendezvousOption, "is_host="+isHost, "use true, false or auto")
	}
	t := NewStore(c, log, c.Endpoint, nil, linger)
	if t.endpoint == "" {
		ep, err := t.defaultEndpoint()
		if err != nil {
			return nil, err
		}
		t.endpoint = ep
	}
	hosting := isHost == "true" || isHost == "1"
	if err := t.CheckEndpoint(hosting || c.NNodes == 1 && isHost != "false" && isHost != "0"); err != nil {
		return nil, err
	}
	switch isHost {
	case "true", "1":
		return t, t.Host(ctx, true)
	case "false", "0":
		return t, nil
	}
	return t, t.Host(ctx, false)
}

// CheckEndpoint checks the endpoint before anything is bound or dialled: host:port with a port in range (0 only
// where zeroOK: this node hosts and nobody else needs to find the port), and a token unless it is loopback.
func (t *Store) CheckEndpoint(zeroOK bool) error {
	host, _, err := agree.SplitEndpoint(failure.RendezvousEndpoint, t.endpoint, zeroOK)
	if err != nil {
		return err
	}
	if t.cfg.Token == "" && !rendezvous.IsLoopback(host) && !t.cfg.AllowUnauthenticated {
		return &rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: string(failure.RendezvousEndpoint), Value: t.endpoint,
			Detail: "not a loopback address, and there is no token (Config.Token): the rendezvous would be open to anyone who can reach it"}
	}
	if t.cfg.Listen != "" {
		if _, _, err := agree.SplitEndpoint(failure.RendezvousListen, t.cfg.Listen, true); err != nil {
			return err
		}
	}
	return nil
}

// defaultEndpoint is the endpoint of a tcp rendezvous without one, on the port option (default DefaultPort):
// loopback for one node; for several, host 0 of a host list that names every node (Config.Hosts). Anything else is a configuration error: a loopback default
// would have every node host a private server and wait out the timeout alone.
func (t *Store) defaultEndpoint() (string, error) {
	port := PortOption(t.cfg)
	if t.cfg.NNodes == 1 {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	need := fmt.Sprintf("tcp rendezvous of %d nodes needs an endpoint (node 0's host:port)", t.cfg.NNodes)
	hosts := t.cfg.Hosts
	switch {
	case len(hosts) == 0:
		return "", agree.ConfigError(failure.RendezvousEndpoint, "", need+", or a host list naming every node (TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or the hosts option)")
	case len(hosts) != t.cfg.NNodes:
		return "", agree.ConfigError(failure.RendezvousEndpoint, "", fmt.Sprintf("%s: the host list has %d hosts, not %d, so its first host need not be node 0",
			need, len(hosts), t.cfg.NNodes))
	}
	t.log.Debug("tcp rendezvous endpoint from the host list", zap.String("host", hosts[0]))
	return net.JoinHostPort(hosts[0], port), nil
}

// Host starts the embedded server on the endpoint (or cfg.Listen), waiting for its host name to resolve (within the
// join timeout) when it does not yet. When must is false, a failure to bind because the address is taken or not
// local means another node hosts it.
func (t *Store) Host(ctx context.Context, must bool) error {
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
		MaxMessage: c.MaxMessage, MaxConns: c.MaxConns, MaxUnauth: c.MaxUnauth, AuthTimeout: c.AuthTimeout, Hosts: t.hosts, Progress: progress.Interval(c.Conf), Logger: c.Logger})
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

// Join enters one generation through the embedded server.
func (t *Store) Join(ctx context.Context, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	if t.server != nil {
		t.server.serveRunID(m.RunID) // this node is node 0 of the job the server serves
	}
	deadline := time.Now().Add(t.cfg.Timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var joined atomic.Pointer[client]
	stop := t.joinProgress(m.Generation, deadline, &joined, log)
	defer stop()
	c, err := dial(dctx, t.resolver(), t.endpoint, t.cfg.Token, t.cfg.Heartbeat, maxOr(t.cfg.MaxMessage), log)
	if err != nil {
		return nil, err
	}
	joined.Store(c)
	req := &message{Type: msgJoin, Member: &m, NNodes: t.cfg.NNodes, HostsSum: t.hostsSum}
	if t.cfg.MinNodes != t.cfg.NNodes {
		req.MinNodes, req.LastCallMS = t.cfg.MinNodes, max(t.cfg.LastCall.Milliseconds(), 1)
	}
	c.joining.Add(1) // the server forms the world meanwhile: waited for, within the call's timeout
	resp, err := c.call(ctx, req, time.Until(deadline))
	c.joining.Add(-1)
	var asg *rendezvous.Assignment
	if err == nil {
		asg, err = received(resp)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	log.Info("rendezvous joined", zap.Int("node_rank", asg.NodeRank), zap.Int("nnodes", asg.NNodes), zap.Int("generation", asg.Generation))
	return &tcpSession{c: c, timeout: t.cfg.Timeout, asg: asg, table: resp.Table, hosts: t.hosts}, nil
}

// received is the share a join's reply carries, checked against the table of its slice beside it (Assignment
// fills its nodes in from it).
func received(resp *message) (*rendezvous.Assignment, error) {
	if resp.Assignment == nil {
		return nil, agree.NewError(rendezvous.ErrProtocol, "join reply without an assignment")
	}
	if resp.Table != nil {
		if err := resp.Table.Check(resp.Assignment); err != nil {
			return nil, err
		}
	}
	return resp.Assignment, nil
}

func (t *Store) resolver() *net.Resolver {
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

// Close stops a hosted server, first waiting (up to the linger time) for the other nodes to leave, so they can
// finish reading the verdict.
func (t *Store) Close() error {
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
	asg     *rendezvous.Assignment // the share as received
	table   *agree.SliceTable      // its slice's nodes, when they came beside it (checked: Fill cannot fail)
	hosts   []string               // names its nodes when the share leaves them out (nameFrom)
}

// Assignment is the share received, its nodes named from the host list when the share left them out, or from its
// slice's table: a node of a pod of 4096 hosts receives a few hundred bytes, or its slice's table as three strings,
// and lays its slice's hosts out here, when they are needed.
func (t *tcpSession) Assignment() *rendezvous.Assignment {
	a := t.asg.Clone()
	if t.table != nil {
		_ = t.table.Fill(a) // checked as it was received
	}
	agree.NameFrom(a, t.hosts)
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

func (t *tcpSession) Fail(ctx context.Context, f rendezvous.Failure) error {
	f = f.Stamped()
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

func (t *tcpSession) Failures() <-chan rendezvous.Failure { return t.c.failures }

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

// PortOption is the port of an endpoint taken from the host list: the port option, default DefaultPort.
func PortOption(c *rendezvous.Config) string {
	if p := c.Conf["port"]; p != "" {
		return p
	}
	return strconv.Itoa(rendezvous.DefaultPort)
}
