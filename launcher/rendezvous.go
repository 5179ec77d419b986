package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/topology"
	"tpurun/rendezvous"

	// The rendezvous backends tpurun links, each registering itself with package rendezvous: the one list.
	_ "tpurun/rendezvous/etcd"
	_ "tpurun/rendezvous/static"
	_ "tpurun/rendezvous/tcp"
)

// RendezvousSpec says how this launcher meets the other nodes of a multi-host job. The zero value (no backend) is
// a world of one: this host alone, as detected.
type RendezvousSpec struct {
	Backend   string        // static, tcp (alias c10d) or etcd; "" is a world of one
	Endpoint  string        // tcp/static: node 0's host:port; etcd: host:2379[,host:2379...]
	RunID     string        // shared by every node; default Spec.RunID
	NNodes    int           // number of nodes (the most, for an elastic world); 0: from the host list (static)
	MinNodes  int           // elastic: the fewest nodes a generation may have (torchrun's --nnodes MIN:MAX); 0: NNodes
	NodeRank  int           // this node's rank, -1 for any
	Conf      string        // key=value,...: join_timeout, heartbeat, is_host, port, hosts, prefix, linger
	Timeout   time.Duration // bound on the join; 0: the backend's default
	Token     string        // shared secret every message carries; required off loopback
	NodeName  string        // this node's identity; default the hostname (with "#<rank>" when NodeRank is given)
	NodeAddr  string        // the address other nodes reach this node at; default the local address toward the endpoint
	NumSlices int           // multi-slice: number of slices; 0: MEGASCALE_NUM_SLICES as detection read it, else 1
	SliceID   int           // multi-slice: this node's slice; -1: MEGASCALE_SLICE_ID as detection read it, else 0
	// Alone: a world of one on purpose (--nnodes 1, --standalone), also on a host whose environment says it is one
	// of several (a TPU slice's host, a multislice job's); the zero spec on such a host joins the others (discover).
	Alone bool
	// AllowUnauthenticated lets a world laid out by the launch (torchrun's --master-addr line, the slice a host's
	// environment describes) meet off loopback without a token, as torchrun's store does; Run warns once. A
	// rendezvous on an endpoint the caller names (tcp, static with Endpoint) still needs Token off loopback.
	AllowUnauthenticated bool
}

// Solo reports whether r describes a world of one (no rendezvous).
func (r RendezvousSpec) Solo() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Solo()
}

// Elastic reports whether r's backend forms an elastic world (tcp, etcd): it assigns the node ranks, and a node may
// come late, come back or replace one. A fixed world (static, the world of one) is laid out by the launch: its node
// count, node ranks and (static) node 0's endpoint, torchrun's --master-addr.
func (r RendezvousSpec) Elastic() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Elastic()
}

func (r RendezvousSpec) validate() error {
	if _, err := rendezvous.Lookup(r.Backend); err != nil {
		return err
	}
	if r.Solo() {
		return r.validateSolo()
	}
	if r.NumSlices < 0 || r.SliceID < -1 || (r.NumSlices > 1 && r.SliceID >= r.NumSlices) {
		return &failure.ConfigError{Field: failure.SettingSliceID, Value: fmt.Sprint(r.SliceID), Hint: fmt.Sprintf("need 0..%d for %d slices", max(r.NumSlices-1, 0), r.NumSlices)}
	}
	if r.NodeRank < -1 || (r.NNodes > 0 && r.NodeRank >= r.NNodes) {
		return &failure.ConfigError{Field: failure.SettingNodeRank, Value: fmt.Sprint(r.NodeRank), Hint: fmt.Sprintf("need -1 (any) or 0..%d", r.NNodes-1)}
	}
	if r.RunID != "" {
		return validateName(failure.SettingRendezvousRunID, r.RunID)
	}
	return nil
}

// validateSolo checks what a world of one node still reads of the rendezvous settings, so that a mistyped value
// is refused on one node as it would be on many: the node rank (only 0), the slice, the options and the timeout.
func (r RendezvousSpec) validateSolo() error {
	if r.NodeRank < -1 || r.NodeRank > 0 {
		return &failure.ConfigError{Field: failure.SettingNodeRank, Value: strconv.Itoa(r.NodeRank),
			Hint: "a world of one node has only node rank 0; for several nodes give every node --nnodes N and its rank, or a rendezvous (--rdzv-backend c10d --rdzv-endpoint HOST:PORT)"}
	}
	if r.SliceID < -1 || r.NumSlices < 0 {
		return &failure.ConfigError{Field: failure.SettingSliceID, Value: strconv.Itoa(r.SliceID), Hint: "need 0 or more (a world of one node is slice 0)"}
	}
	if r.Timeout < 0 {
		return &failure.ConfigError{Field: failure.SettingRendezvousTimeout, Value: r.Timeout.String(), Hint: "must be positive"}
	}
	conf, err := rendezvous.ParseConf(r.Conf)
	if err == nil {
		err = rendezvous.CheckConf(conf)
	}
	if err == nil && r.RunID != "" {
		err = validateName(failure.SettingRendezvousRunID, r.RunID)
	}
	return err
}

// resolveRendezvous fills in what the rendezvous spec leaves to the environment, as detection read it once: the
// slice setting (MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID) and the token (TPURUN_RDZV_TOKEN).
func (j *job) resolveRendezvous() error {
	if err := j.discover(); err != nil {
		return err
	}
	r := &j.spec.Rendezvous
	if r.Solo() {
		return nil
	}
	if r.Token == "" {
		r.Token = lookupEnv(j.spec.Env, "TPURUN_RDZV_TOKEN")
	}
	for _, v := range []struct {
		name       string
		dst        *int
		unset, def int
	}{{topology.EnvMegascaleNumSlices, &r.NumSlices, 0, 1}, {topology.EnvMegascaleSliceID, &r.SliceID, -1, 0}} {
		if *v.dst != v.unset {
			continue
		}
		*v.dst = v.def
		if j.host == nil {
			continue
		}
		if val, ok := j.host.Megascale[v.name]; ok {
			n, err := topology.ParseMegascale(v.name, val.V)
			if err != nil {
				return &failure.ConfigError{Field: failure.Setting(v.name), Value: val.V, Hint: "need a whole number from 0 (or unset it)"}
			}
			*v.dst = n
		}
	}
	return r.validate()
}

// openRendezvous opens the backend of r: the world of one, or the real one configured from r, the hosts
// detection found (static) and the job's environment (read once, passed down).
func openRendezvous(ctx context.Context, r RendezvousSpec, runID string, h *topology.Host, env []string, j *job) (*rendezvous.Rendezvous, error) {
	if r.Solo() { // it reads none of the settings: validateSolo checked those a world of one keeps
		return rendezvous.New(ctx, rendezvous.Config{Backend: r.Backend, Logger: j.log})
	}
	conf, err := rendezvous.ParseConf(r.Conf)
	if err != nil {
		return nil, err
	}
	c := r.config(conf)
	c.Logger = j.log
	if c.RunID == "" {
		c.RunID = runID
	}
	if c.Hosts, c.NodeRank, err = placement(r, conf, h); err != nil {
		return nil, err
	}
	if j.layout != nil && j.layout.Slices > 1 { // a slice's host list names only that slice's nodes: no host list
		c.Hosts = nil
	}
	rz, err := rendezvous.New(ctx, c)
	if errors.Is(err, rendezvous.ErrNoToken) {
		return nil, fmt.Errorf("%w; give every node the same secret: TPURUN_RDZV_TOKEN=SECRET in its environment, or --rdzv-token SECRET "+
			"(tpurun asks for one on an endpoint you name; torchrun's --master-addr line, and a TPU slice's hosts meeting by themselves, run without one, with a warning)", err)
	}
	if err == nil && rz.Unauthenticated() {
		j.log.Warn("the rendezvous runs without a token, as torchrun's does: anyone who can reach "+rz.Endpoint()+" can join this job; "+
			"give every node the same TPURUN_RDZV_TOKEN=SECRET (or --rdzv-token SECRET) to require one", zap.String("endpoint", rz.Endpoint()))
	}
	return rz, err
}

// config is r as the rendezvous package takes it, before placement adds the host list and the node rank.
func (r RendezvousSpec) config(conf map[string]string) rendezvous.Config {
	return rendezvous.Config{Backend: r.Backend, Endpoint: r.Endpoint, RunID: r.RunID, Conf: conf, NNodes: r.NNodes, MinNodes: r.MinNodes,
		NodeRank: r.NodeRank, Timeout: r.Timeout, Token: r.Token, AllowUnauthenticated: r.AllowUnauthenticated}
}

// placement is the host list the rendezvous gets and the node rank of a fixed (static) world: the hosts option,
// else what detection read (Host.NodeHosts, Host.NodeRank: TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST, ...). A node
// rank that was set wins. An elastic backend (tcp, etcd) takes only the host list (its first host names the
// default tcp endpoint) and assigns ranks itself. A malformed host list stops only a run whose backend needs it.
func placement(r RendezvousSpec, conf map[string]string, h *topology.Host) ([]string, int, error) {
	b, err := rendezvous.Lookup(r.Backend)
	if err != nil {
		return nil, 0, err
	}
	var hosts []string
	var rank topology.Value[int]
	if h != nil {
		hosts, rank = h.NodeHosts.V, h.NodeRank
		if c := r.config(conf); h.NodeErr != nil && b.NeedsHosts(&c) && conf["hosts"] == "" {
			return nil, 0, h.NodeErr
		}
	}
	if v := conf["hosts"]; v != "" {
		if hosts, err = topology.ParseHostList(v); err != nil {
			return nil, 0, &failure.ConfigError{Field: failure.SettingRendezvousHostsOption, Value: v, Hint: err.Error()}
		}
	}
	nodeRank := r.NodeRank
	if nodeRank < 0 && rank.IsSet() && !b.Elastic() { // a fixed world's ranks come with the launch
		nodeRank = rank.V
	}
	return hosts, nodeRank, nil
}

// member is what this node brings to the join of generation g.
func (j *job) member(rz *rendezvous.Rendezvous, g int) (rendezvous.Member, error) {
	r := j.spec.Rendezvous
	slice := j.device().Kind().FixedSlice()
	m := rendezvous.Member{Instance: j.instance, Host: r.NodeName, Addr: r.NodeAddr, LocalWorkers: j.localWorkers,
		Accelerator: j.accelerator, RunID: j.spec.RunID, SliceID: r.SliceID, NumSlices: max(r.NumSlices, 1),
		Rank: r.NodeRank, Generation: g, Ports: j.ports, UnevenWorkers: !slice, Role: j.spec.Role}
	// A static world named by a host list takes each node's name and address from it; otherwise (tcp, etcd, a
	// static world named by its endpoint, torchrun's --master_addr line, or the world of one) a node names itself.
	if !rz.NamesNodes() {
		if m.Host == "" {
			var err error
			if m.Host, err = os.Hostname(); err != nil {
				return m, fmt.Errorf("%w: hostname: %w; give the node a name", failure.ErrInternal, err)
			}
			switch {
			case r.NodeRank >= 0: // several agents on one host, told apart by their ranks (torchrun's usage)
				m.Host += "#" + strconv.Itoa(r.NodeRank)
			case !slice && !r.Solo(): // several agents on one CPU/GPU host (tests, host-network pods): torchrun's node id has the pid
				m.Host += "_" + strconv.Itoa(os.Getpid())
			}
		}
		if m.Addr == "" {
			m.Addr = localAddr(rz.Endpoint())
		}
	}
	return m, nil
}

// device is what this node runs on: the detected device, or a ready plan's.
func (j *job) device() topology.Device {
	if j.host != nil {
		return j.host.Device.V
	}
	return j.plan.Device
}

// localAddr is the address of this host that reaches endpoint: loopback for a loopback (or empty) endpoint.
func localAddr(endpoint string) string {
	first := strings.Split(endpoint, ",")[0]
	h, _, err := net.SplitHostPort(first)
	if err != nil || h == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); (ip != nil && ip.IsLoopback()) || h == "localhost" {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", first) // no packet is sent: this only asks the kernel for the route
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// rendezvousErr marks a rendezvous failure as failure.ErrRendezvous (exit 69), keeping configuration errors as they are
// (exit 2).
func rendezvousErr(step string, err error) error {
	if exitcode.IsUsage(err) {
		return err
	}
	var se *failure.SignalError
	if errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, rendezvous.ErrJobClosed) {
		return err
	}
	if errors.Is(err, rendezvous.ErrDuplicateNode) {
		return fmt.Errorf("%w: %s: %w; if two tpurun agents share this host, give each its own --node-name (or --node-rank)", failure.ErrRendezvous, step, err)
	}
	if errors.Is(err, rendezvous.ErrUnresolved) { // waited for within the join timeout: pods appear in DNS as they start
		return fmt.Errorf("%w: %s: %w; check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)", failure.ErrRendezvous, step, err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound { // etcd's endpoints
		return &failure.ConfigError{Field: failure.SettingRendezvousEndpoint, Value: dns.Name,
			Hint: "this host name does not resolve (no such host); check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)"}
	}
	return fmt.Errorf("%w: %s: %w", failure.ErrRendezvous, step, err)
}
