package topology

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"time"

	"tpurun/internal/setting"
)

// Node is one host of the world.
type Node struct {
	Rank         int    `json:"rank"`
	Host         string `json:"host"`
	LocalWorkers int    `json:"local_workers"`
}

// Worker is one process of the world: who it is, which replicas (device ordinals) it owns and the environment it
// must see. Env holds only what the plan decides; the launcher adds run-time values (run id, ports it picked at
// launch, result channel, restart count) on top.
type Worker struct {
	Rank      int               `json:"rank"`
	LocalRank int               `json:"local_rank"`
	NodeRank  int               `json:"node_rank"`
	Replicas  []int             `json:"replicas"`
	Env       map[string]string `json:"env"`
}

// Plan is the complete answer for one run: every node and every worker, world-wide.
type Plan struct {
	Device  Device   `json:"device"`
	Nodes   []Node   `json:"nodes"`
	Workers []Worker `json:"workers"`
}

// Local returns the workers of node nodeRank, in local-rank order.
func (p *Plan) Local(nodeRank int) []Worker {
	var out []Worker
	for _, w := range p.Workers {
		if w.NodeRank == nodeRank {
			out = append(out, w)
		}
	}
	return out
}

// DefaultTPUPortBase is the first TPU_PROCESS_PORT by convention.
const DefaultTPUPortBase = 8476

// Request is what the user asked of the plan: how many processes, SPMD, ports, and (after a rendezvous) the agreed
// hosts and this node's rank.
type Request struct {
	NProcs       int    // --nprocs; 0 = unset (one process per chip / GPU; 1 on CPU)
	NProcsSource Source // where NProcs came from; zero means Flag("nprocs")
	SPMD         bool   // --spmd (XLA_USE_SPMD from env is in Host.SPMD)
	TPUPortBase  int    // --tpu-port-base; 0 = 8476
	// IsolateGPUs gives GPU worker i CUDA_VISIBLE_DEVICES=<its GPU> alone. Off (the default, as torchrun), the
	// workers keep the parent's CUDA_VISIBLE_DEVICES, see every usable GPU and each uses cuda:LOCAL_RANK; on, a
	// program that selects cuda:LOCAL_RANK fails from local rank 1 ("invalid device ordinal").
	IsolateGPUs bool

	// Hosts, when non-nil, are the agreed node addresses in node-rank order (a rendezvous result); they replace the
	// hosts of the Host, and NodeRank says which one this is. Nil means: what detection found (env/metadata), or
	// this host alone.
	Hosts    []string
	NodeRank int
}

// splitChoices lists the valid process counts for n chips with one chip per process: 1, 2, 4 and n.
func splitChoices(n int) []string {
	var out []string
	for _, c := range []int{1, 2, 4} {
		if c < n {
			out = append(out, strconv.Itoa(c))
		}
	}
	return append(out, strconv.Itoa(n))
}

func validSplit(k, n int) bool {
	if k < 1 || k > n {
		return false
	}
	if _, err := ChipBounds(k); err != nil {
		return false
	}
	return k == 1 || k == 2 || k == 4 || k == n
}

// NewPlan is the one way to plan: the plan of the world w for the detected host and the request. The zero World is
// this host alone, as detected: one worker per chip by default (per GPU; one on CPU), every worker's device and
// topology env, validated against the request; a multi-host slice (hosts from env, metadata or req.Hosts) gives a
// plan covering the whole slice. A world of several nodes (what a rendezvous agreed on) is planned as worldPlan
// says. It is pure: TPU_PROCESS_PORTs are base + local rank, and (*Plan).CheckPorts checks them before the start.
// Errors are *ConfigError.
func NewPlan(h *Host, req Request, w World) (*Plan, error) {
	if !w.Solo() {
		return worldPlan(h, req, w)
	}
	return hostPlan(h, req)
}

// hostPlan is NewPlan's plan of this host alone.
func hostPlan(h *Host, req Request) (*Plan, error) {
	if !req.NProcsSource.IsSet() {
		req.NProcsSource = Flag("nprocs")
	}
	if req.NProcs < 0 {
		return nil, &ConfigError{Name: setting.NProcs, Value: strconv.Itoa(req.NProcs), Problem: "is negative", Sources: []Source{req.NProcsSource}, Hint: "leave it unset for one process per device"}
	}
	return h.Device.V.Kind().plan(h, req)
}

// JAX reads the first two in jax.distributed.initialize() (jax/_src/distributed.py State.initialize). It reads no
// process id or count from the environment (JAX 0.11 included); the launcher sets the conventional names of both,
// which programs pass on themselves: initialize(process_id=int(os.environ["JAX_PROCESS_ID"]),
// num_processes=int(os.environ["JAX_NUM_PROCESSES"])) (docs/TOPOLOGY.md).
const (
	EnvJAXCoordinator    = "JAX_COORDINATOR_ADDRESS"
	EnvJAXLocalDeviceIDs = "JAX_LOCAL_DEVICE_IDS"
	EnvJAXProcessID      = "JAX_PROCESS_ID"    // = RANK
	EnvJAXNumProcesses   = "JAX_NUM_PROCESSES" // = WORLD_SIZE
)

// SetJAXCoordinator sets JAX_COORDINATOR_ADDRESS=hostport on every CPU and GPU worker of p that has an env, so that
// jax.distributed.initialize(process_id=RANK, num_processes=WORLD_SIZE) needs no address. TPU workers are left to
// JAX's cloud-TPU detection, which picks host 0 of the slice and port 8482 itself. hostport is node 0's address
// and a port free there that every node agrees on (not MASTER_PORT, which torch's TCPStore binds on rank 0).
func (p *Plan) SetJAXCoordinator(hostport string) {
	if !p.Device.Kind().JAXCoordinator() || hostport == "" {
		return
	}
	for i := range p.Workers {
		if p.Workers[i].Env != nil {
			p.Workers[i].Env[EnvJAXCoordinator] = hostport
		}
	}
}

// WorldNode is one node of an agreed world, as a rendezvous hands it to the planner (in node-rank order).
type WorldNode struct {
	Host         string // the node's name
	Addr         string // the address other nodes reach it at: what TPU_PROCESS_ADDRESSES and the world env name
	LocalWorkers int
	SliceID      int
	Role         string // torchrun's role of the node's workers: ROLE_RANK and ROLE_WORLD_SIZE count within it
}

// World is the agreed world of a run: every node in node-rank order, which one this host is, and the multi-slice
// setting. The zero World is "this host alone, as detected": the hosts of an env- or metadata-described slice, or
// this one host.
type World struct {
	Nodes                []WorldNode
	NodeRank             int
	NumSlices            int    // > 1: a multi-slice job (MEGASCALE_*)
	MegascaleCoordinator string // host 0 of slice 0, the address alone
	MegascalePort        int
	// EverySlice plans the workers of every slice with their env, not only this node's slice's: what a plan
	// shown for the whole job needs (JobLayout.World), and a run does not.
	EverySlice bool
}

// Solo reports whether w is the zero World: no rendezvous, the host as detected.
func (w World) Solo() bool { return len(w.Nodes) == 0 }

// SoloNodeRank is this host's node in a plan built from the detected host alone with the default request:
// TPU_WORKER_ID on an env- or metadata-described multi-host slice, else 0. SoloNode answers for any request (a
// one-chip run, --nprocs 1, is this host alone: node 0).
func SoloNodeRank(h *Host) int { return SoloNode(h, Request{}) }

// LocalWorkers is how many workers this host runs in a world of nnodes nodes (0: as detected) in numSlices
// slices: what the node announces when it joins a rendezvous. It validates the request like the full plan does.
func LocalWorkers(h *Host, req Request, nnodes, numSlices int) (int, error) {
	return h.Device.V.Kind().localWorkers(h, req, nnodes, numSlices)
}

// worldPlan builds the plan of the agreed world w (NewPlan's part for a world of several nodes) from this host's
// detection and request, purely: it opens no socket (ports are checked before the start by (*Plan).CheckPorts).
// TPU slices are planned per slice (the slice's hosts in node order); CPU and GPU worlds give node n's local rank lr
// the global rank FirstRank(n)+lr. A multi-slice world gets MEGASCALE_* on every worker.
func worldPlan(h *Host, req Request, w World) (*Plan, error) {
	if w.NodeRank < 0 || w.NodeRank >= len(w.Nodes) {
		return nil, &ConfigError{Name: setting.NodeRank, Value: strconv.Itoa(w.NodeRank),
			Problem: fmt.Sprintf("is not an index of the %d agreed nodes", len(w.Nodes)), Sources: []Source{Derived("rendezvous")}}
	}
	p, err := h.Device.V.Kind().worldPlan(h, req, w)
	if err != nil {
		return nil, err
	}
	w.megascale(p)
	return p, nil
}

// Spread is the plan of the agreed world w for a ready plan p (one made by hand, not detected): every node of w gets
// the split of p's node nodeRank, with consecutive global ranks. The zero World is p itself.
func (p *Plan) Spread(nodeRank int, w World) *Plan {
	if w.Solo() {
		return p
	}
	local := p.Local(nodeRank)
	out := &Plan{Device: p.Device}
	rank := 0
	for n, node := range w.Nodes {
		out.Nodes = append(out.Nodes, Node{Rank: n, Host: node.Addr, LocalWorkers: node.LocalWorkers})
		for lr := 0; lr < node.LocalWorkers; lr++ {
			out.Workers = append(out.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: localEnv(local, lr)})
			rank++
		}
	}
	return out
}

// localEnv is a copy of the env of local rank lr of local (empty past its end).
func localEnv(local []Worker, lr int) map[string]string {
	env := map[string]string{}
	if lr < len(local) {
		maps.Copy(env, local[lr].Env)
	}
	return env
}

// addrs are the agreed addresses of the nodes in node-rank order (the name where a node gave no address).
func (w World) addrs() []string {
	out := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		out[i] = n.Addr
		if out[i] == "" {
			out[i] = n.Host
		}
	}
	return out
}

// firstRanks is each node's first global rank: the local workers of the nodes before it.
func (w World) firstRanks() []int {
	out := make([]int, len(w.Nodes))
	sum := 0
	for i, n := range w.Nodes {
		out[i] = sum
		sum += n.LocalWorkers
	}
	return out
}

// perHost is what the CPU and GPU kinds share: each host is planned alone, a world lays the hosts' plans end to end
// (spreadWorld) and may give its nodes different numbers of workers, the nodes come from the environment, and no
// device node is guarded.
type perHost struct{}

func (perHost) FixedSlice() bool                             { return false }
func (perHost) JAXCoordinator() bool                         { return true }
func (perHost) nodes(d *detector)                            { d.envNodes() }
func (perHost) soloNode(*Host, Request) int                  { return 0 }
func (perHost) usableNodes(*Host) []string                   { return nil }
func (perHost) probe(context.Context, *Host, Options) *Probe { return nil }

func (perHost) localWorkers(h *Host, req Request, _, _ int) (int, error) {
	p, err := NewPlan(h, req, World{})
	if err != nil {
		return 0, err
	}
	return len(p.Workers), nil
}

func (perHost) worldPlan(h *Host, req Request, w World) (*Plan, error) {
	local, err := NewPlan(h, req, World{})
	if err != nil {
		return nil, err
	}
	return spreadWorld(local, w), nil
}

// spreadWorld turns the plan of one host (CPU or GPU) into the world of w: every node runs its agreed number of
// workers with the same split, node n's local rank lr is global rank FirstRank(n)+lr and owns that replica. As
// torchrun assigns them, ROLE_RANK and ROLE_WORLD_SIZE count the workers of the node's role, in node order.
func spreadWorld(local *Plan, w World) *Plan {
	p := &Plan{Device: local.Device}
	first := w.firstRanks()
	addrs := w.addrs()
	ks := make([]int, len(w.Nodes))
	roleSize, roleNext := map[string]int{}, map[string]int{}
	for n, node := range w.Nodes {
		ks[n] = node.LocalWorkers
		if n == w.NodeRank || ks[n] == 0 {
			ks[n] = len(local.Workers)
		}
		roleSize[node.Role] += ks[n]
	}
	for n, node := range w.Nodes {
		p.Nodes = append(p.Nodes, Node{Rank: n, Host: addrs[n], LocalWorkers: ks[n]})
		for lr := 0; lr < ks[n]; lr++ {
			rank := first[n] + lr
			var env map[string]string
			if lr < len(local.Workers) {
				env = maps.Clone(local.Workers[lr].Env)
			}
			if env == nil {
				env = map[string]string{}
			}
			env["ROLE_RANK"] = strconv.Itoa(roleNext[node.Role] + lr)
			env["ROLE_WORLD_SIZE"] = strconv.Itoa(roleSize[node.Role])
			p.Workers = append(p.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: env})
		}
		roleNext[node.Role] += ks[n]
	}
	return p
}

// multisliceWorld is the world plan of a multi-slice TPU job: this node's slice is planned from the hosts of that
// slice alone (TPU_WORKER_ID, TPU_PROCESS_ADDRESSES and CLOUD_TPU_TASK_ID are per slice), and the slices are laid
// end to end for the global ranks (RANK, WORLD_SIZE) in the agreed node order. Other slices' workers carry only
// their ranks (a node starts its own workers only), unless w.EverySlice (a plan shown: otherSlices).
func multisliceWorld(h *Host, req Request, w World) (*Plan, error) {
	self := w.Nodes[w.NodeRank]
	addrs := w.addrs()
	var hosts []string
	sliceRank := -1
	for i, n := range w.Nodes {
		if n.SliceID == self.SliceID {
			if i == w.NodeRank {
				sliceRank = len(hosts)
			}
			hosts = append(hosts, addrs[i])
		}
	}
	req.Hosts, req.NodeRank = hosts, sliceRank
	sp, err := NewPlan(h, req, World{})
	if err != nil {
		return nil, err
	}
	first := w.firstRanks()
	world := &Plan{Device: sp.Device}
	others := newOtherSlices(h, req, w, addrs, first)
	sliceFirst, inSlice := -1, 0
	for i, n := range w.Nodes {
		world.Nodes = append(world.Nodes, Node{Rank: i, Host: n.Host, LocalWorkers: n.LocalWorkers})
		if n.SliceID != self.SliceID {
			wks, err := others.workers(i, first[i])
			if err != nil {
				return nil, err
			}
			world.Workers = append(world.Workers, wks...)
			continue
		}
		if sliceFirst < 0 {
			sliceFirst = first[i]
		}
		for _, wk := range sp.Local(inSlice) {
			reps := make([]int, len(wk.Replicas))
			for j, r := range wk.Replicas {
				reps[j] = r + sliceFirst*len(wk.Replicas)
			}
			world.Workers = append(world.Workers, Worker{Rank: first[i] + wk.LocalRank, LocalRank: wk.LocalRank,
				NodeRank: i, Replicas: reps, Env: wk.Env})
		}
		inSlice++
	}
	return world, nil
}

// megascale sets MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID and MEGASCALE_PORT on
// every worker of p that has an env (TPU_FACTS.md); a single slice changes nothing. The coordinator's address and
// port that a worker inherits (its slice's env: GKE, a JobSet's downward API, tpu-env) are kept as given, byte for
// byte: the agreed world only fills in what the environment did not say.
func (w World) megascale(p *Plan) {
	if w.NumSlices <= 1 {
		return
	}
	coord := w.MegascaleCoordinator
	if host, _, err := net.SplitHostPort(coord); err == nil {
		coord = host // the address alone, as GKE sets it; the port is MEGASCALE_PORT
	}
	for i := range p.Workers {
		wk := &p.Workers[i]
		if wk.Env == nil {
			continue // another slice's worker: only its rank is known here
		}
		if _, inherited := wk.Env[megascaleCoordinator]; !inherited {
			wk.Env[megascaleCoordinator] = coord
		}
		if _, inherited := wk.Env[megascalePort]; !inherited {
			wk.Env[megascalePort] = strconv.Itoa(w.MegascalePort)
		}
		wk.Env[EnvMegascaleNumSlices] = strconv.Itoa(w.NumSlices)
		if n := wk.NodeRank; n < len(w.Nodes) {
			wk.Env[EnvMegascaleSliceID] = strconv.Itoa(w.Nodes[n].SliceID)
		}
	}
}

// PortFree reports whether a TCP port can be bound on every address of this host right now.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// CheckPorts is the pre-start check of the TPU_PROCESS_PORTs of node nodeRank's workers (nil free means
// PortFree). On a plan of one node a busy port is moved to a free one (TPU_PROCESS_PORT and every worker's
// TPU_PROCESS_ADDRESSES change together); on several nodes every port must stay fixed, so a busy one is a
// *PortBusyError naming the holder found in procRoot. Another launcher on this machine probing its own ports holds
// one for microseconds: a port is busy only when it stays so over a few tries.
func (p *Plan) CheckPorts(nodeRank int, procRoot string, free func(int) bool) error {
	if free == nil {
		free = PortFree
	}
	m := p.portMover(nodeRank, free)
	for i := range p.Workers {
		w := &p.Workers[i]
		port, ok := w.tpuPort()
		if w.NodeRank != nodeRank || !ok || !stillBusy(free, port) {
			continue
		}
		if len(p.Nodes) > 1 {
			pe := &PortBusyError{Port: port, LocalRank: w.LocalRank}
			if pid, cmd, err := PortHolder(procRoot, port); err == nil {
				pe.PID, pe.Command = pid, cmd
			}
			return pe
		}
		if err := m.move(w, port); err != nil {
			return err
		}
	}
	p.moveAddresses(m.moved)
	return nil
}

// stillBusy reports whether port stays busy over a few tries.
func stillBusy(free func(int) bool, port int) bool {
	for try := range 4 {
		if free(port) {
			return false
		}
		time.Sleep(time.Duration(5<<try) * time.Millisecond)
	}
	return true
}

// tpuPort is the worker's TPU_PROCESS_PORT, when it has one.
func (w *Worker) tpuPort() (int, bool) {
	v, ok := w.Env["TPU_PROCESS_PORT"]
	if !ok {
		return 0, false
	}
	port, err := strconv.Atoi(v)
	return port, err == nil
}

// portMover moves the busy TPU_PROCESS_PORTs of one node to free ports above the node's own.
type portMover struct {
	free  func(int) bool
	local int          // the node's workers
	used  map[int]bool // the node's ports, as planned and as moved to
	moved map[int]int  // old port -> new port
	next  int          // the next port to try; 0 before the first move
}

func (p *Plan) portMover(nodeRank int, free func(int) bool) *portMover {
	m := &portMover{free: free, used: map[int]bool{}, moved: map[int]int{}}
	for _, w := range p.Workers {
		if w.NodeRank != nodeRank {
			continue
		}
		m.local++
		if port, ok := w.tpuPort(); ok {
			m.used[port] = true
		}
	}
	return m
}

// move gives w the next free port in place of port.
func (m *portMover) move(w *Worker, port int) error {
	if m.next == 0 {
		m.next = port + m.local
	}
	for m.next < 65536 && (m.used[m.next] || !m.free(m.next)) {
		m.next++
	}
	if m.next >= 65536 {
		return &PortBusyError{Port: port, LocalRank: w.LocalRank}
	}
	m.used[m.next] = true
	m.moved[port] = m.next
	w.Env["TPU_PROCESS_PORT"] = strconv.Itoa(m.next)
	m.next++
	return nil
}

// moveAddresses moves the moved ports in every worker's TPU_PROCESS_ADDRESSES. On one node every entry is this
// host's (named localhost), so a moved port moves there.
func (p *Plan) moveAddresses(moved map[int]int) {
	if len(moved) == 0 {
		return
	}
	for i := range p.Workers {
		env := p.Workers[i].Env
		if addrs, ok := env["TPU_PROCESS_ADDRESSES"]; ok {
			env["TPU_PROCESS_ADDRESSES"] = movePorts(addrs, moved)
		}
	}
}

// movePorts rewrites the host:port entries of a comma-separated list whose port moved.
func movePorts(addrs string, moved map[int]int) string {
	parts := strings.Split(addrs, ",")
	for j, a := range parts {
		host, ps, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if old, err := strconv.Atoi(ps); err == nil {
			if to, ok := moved[old]; ok {
				parts[j] = net.JoinHostPort(host, strconv.Itoa(to))
			}
		}
	}
	return strings.Join(parts, ",")
}

// SoloNode is this host's node in NewPlan(h, req) (a plan built from the detected host alone): TPU_WORKER_ID on
// an env- or metadata-described multi-host slice, else 0; 0 too for a one-chip run (--nprocs 1), which is this
// host alone.
func SoloNode(h *Host, req Request) int { return h.Device.V.Kind().soloNode(h, req) }

// JobLayout is the job this host's environment says it is one host of: the hosts of its slice in worker order
// (TPU_WORKER_HOSTNAMES, or the metadata server's worker list) and its worker id, and, in a multislice job
// (MEGASCALE_NUM_SLICES > 1), the number of slices, its slice and the coordinator's host. Every host of the job
// derives the same world from its own environment: nodes = hosts per slice x slices, node rank = slice id x hosts
// per slice + worker id, node 0 the coordinator's host (slice 0's first host). That is how JAX numbers the
// processes of a multislice job on GKE (TPU_FACTS.md), and why discovery runs once per job, not once per slice.
type JobLayout struct {
	Hosts       []string `json:"hosts,omitempty"` // this host's slice in worker order; nil for a one-host slice the environment does not list
	HostsSource Source   `json:"hosts_source"`
	WorkerID    int      `json:"worker_id"` // this host's index in Hosts
	Slices      int      `json:"slices"`    // 1, or MEGASCALE_NUM_SLICES
	SliceID     int      `json:"slice_id"`  // 0, or MEGASCALE_SLICE_ID
	// Coordinator is node 0's host: the host of MEGASCALE_COORDINATOR_ADDRESS in a multislice job, else Hosts[0].
	Coordinator       string `json:"coordinator"`
	CoordinatorSource Source `json:"coordinator_source"`
}

// HostsPerSlice is the number of hosts of each slice.
func (l *JobLayout) HostsPerSlice() int { return max(len(l.Hosts), 1) }

// NNodes is the number of hosts of the whole job: every slice's.
func (l *JobLayout) NNodes() int { return l.HostsPerSlice() * l.Slices }

// NodeRank is this host's node in the job: its slice's hosts come after every host of the slices before it.
func (l *JobLayout) NodeRank() int { return l.SliceID*l.HostsPerSlice() + l.WorkerID }

// Self is the name the other hosts reach this host by (its entry in Hosts), "" when the slice is not listed.
func (l *JobLayout) Self() string {
	if l.WorkerID < len(l.Hosts) {
		return l.Hosts[l.WorkerID]
	}
	return ""
}

// String says where this host stands, for a log line: "worker 1 of 2 (TPU_WORKER_HOSTNAMES)", with the slice in
// a multislice job.
func (l *JobLayout) String() string {
	s := fmt.Sprintf("worker %d of %d (%s)", l.WorkerID, l.HostsPerSlice(), l.HostsSource)
	if l.Slices > 1 {
		s += fmt.Sprintf(" in slice %d of %d", l.SliceID, l.Slices)
	}
	return s
}

// JobLayout is the job this TPU host's environment describes (see JobLayout), or nil when it describes no job of
// several hosts: not a TPU, one host of one slice, or a one-chip run of one host (xmp.spawn(nprocs=1)'s, which is
// this host's alone, whatever the slice). What cannot be made consistent is a *ConfigError naming the variable: a
// multislice job without MEGASCALE_SLICE_ID or MEGASCALE_COORDINATOR_ADDRESS, or a slice id out of range (detection
// already refused a host list without this host's worker id in it).
func (h *Host) JobLayout(req Request) (*JobLayout, error) {
	t := h.tpu()
	if !h.Device.V.Kind().FixedSlice() || (req.NProcs == 1 && !req.SPMD && !h.SPMD.V) {
		return nil, nil
	}
	l := &JobLayout{Slices: 1, Hosts: t.Hostnames.V, HostsSource: t.Hostnames.Source, WorkerID: t.WorkerID.V}
	if err := h.megascaleLayout(l); err != nil {
		return nil, err
	}
	if l.NNodes() < 2 {
		return nil, nil
	}
	if l.Slices == 1 {
		l.Coordinator, l.CoordinatorSource = l.Hosts[0], l.HostsSource
	}
	return l, nil
}

// megascaleLayout fills in the slices of a multislice job from MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID and
// MEGASCALE_COORDINATOR_ADDRESS (env or tpu-env), which every host of the job must have alike.
func (h *Host) megascaleLayout(l *JobLayout) error {
	t := h.tpu()
	n, ok := t.Megascale[EnvMegascaleNumSlices]
	if !ok {
		return nil
	}
	slices, err := ParseMegascale(EnvMegascaleNumSlices, n.V)
	if err != nil || slices < 2 {
		return err
	}
	l.Slices = slices
	id, ok := t.Megascale[EnvMegascaleSliceID]
	if !ok {
		return &ConfigError{Name: EnvMegascaleSliceID, Problem: fmt.Sprintf("is not set, but %s=%d makes this host one of a multislice job", EnvMegascaleNumSlices, slices),
			Sources: []Source{n.Source}, Hint: "set it to this host's slice, from 0 (JobSet: the job-global-index label, through the downward API)"}
	}
	if l.SliceID, err = ParseMegascale(EnvMegascaleSliceID, id.V); err != nil {
		return err
	}
	if l.SliceID >= slices {
		return &ConfigError{Name: EnvMegascaleSliceID, Value: id.V, Problem: fmt.Sprintf("is not a slice of the %d", slices),
			Sources: []Source{id.Source, n.Source}, Choices: indexChoices(slices)}
	}
	c, ok := t.Megascale[megascaleCoordinator]
	if !ok {
		return &ConfigError{Name: megascaleCoordinator, Problem: fmt.Sprintf("is not set, but %s=%d makes this host one of a multislice job whose hosts must all meet one coordinator", EnvMegascaleNumSlices, slices),
			Sources: []Source{n.Source}, Hint: "set it on every host to the first host of slice 0 (JobSet: <jobset>-<job>-0-0.<subdomain>)"}
	}
	l.Coordinator, l.CoordinatorSource = coordinatorHost(c.V), c.Source
	return nil
}

// coordinatorHost is the host of a coordinator address given as host, host:port or [v6]:port.
func coordinatorHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return strings.Trim(addr, "[]")
}

// Alone is h as a one-host slice of its own chips: what a deliberate single-host run (--nnodes 1, --standalone) on
// one host of a multi-host slice plans, so that neither the plan nor the workers' TPU runtime waits for the other
// hosts: no host list and worker 0, host bounds 1,1,1, the accelerator type that this host's chips make alone (v4-8
// for four v4 chips), no multislice variables. Ray gives a worker that uses part of a host the same one-host bounds.
func (h *Host) Alone() *Host {
	c := *h
	c.NodeHosts, c.NodeRank = Value[[]string]{}, Value[int]{}
	t, ok := h.state.(*tpuHost)
	if !ok {
		return &c
	}
	ct := *t
	src := Derived("one host alone (--nnodes 1)")
	ct.Hostnames, ct.WorkerID = Value[[]string]{}, Value[int]{}
	ct.HostBounds, ct.ProcessBounds = val(Bounds{1, 1, 1}, src), Value[Bounds]{}
	if a, ok := deriveAccelerator(t.Accelerator.V.Family.Name, len(t.Chips)); ok {
		ct.Accelerator = val(a, src)
	}
	ct.Megascale = nil
	c.state = &ct
	return &c
}

// JobEnv are the variables that describe the job beyond this host (the slice's hosts, the multislice job, GKE's
// host grid of the slice): what the workers of a host running Alone must not inherit, or their runtime would wait
// for the other hosts.
func JobEnv() []string {
	return append([]string{"TPU_WORKER_HOSTNAMES", "HOST_BOUNDS"}, megascaleNames...)
}

// World is the job's world as this host alone can lay it out, before any rendezvous: every node of every slice
// with localWorkers workers each, this host's slice named by its host list (the other slices' hosts are named by
// their slice and worker id, <slice-S-worker-W>: only they list them), and the multislice coordinator; every
// slice's workers with the env each will get (EverySlice). What `tpurun plan` shows.
func (l *JobLayout) World(localWorkers, megascalePort int) World {
	w := World{NodeRank: l.NodeRank(), MegascaleCoordinator: l.Coordinator, MegascalePort: megascalePort, EverySlice: true}
	if l.Slices > 1 {
		w.NumSlices = l.Slices
	}
	per := l.HostsPerSlice()
	for n := range l.NNodes() {
		slice, worker := n/per, n%per
		host := fmt.Sprintf("<slice-%d-worker-%d>", slice, worker) // no comma: it is listed in TPU_WORKER_HOSTNAMES
		if slice == l.SliceID && worker < len(l.Hosts) {
			host = l.Hosts[worker]
		}
		w.Nodes = append(w.Nodes, WorldNode{Host: host, Addr: host, LocalWorkers: localWorkers, SliceID: slice})
	}
	return w
}

// JobPlan is the plan of the job-wide world this host's environment describes (JobLayout), as a plain run forms it
// by rendezvous, and this host's node in it; l is that layout (its Coordinator is node 0's host). Where the host is
// one alone (no layout), l is nil and the plan and node are NewPlan's for the host as detected.
func (h *Host) JobPlan(req Request) (plan *Plan, node int, l *JobLayout, err error) {
	if l, err = h.JobLayout(req); err != nil || l == nil {
		if err == nil {
			plan, err = NewPlan(h, req, World{})
		}
		return plan, SoloNode(h, req), nil, err
	}
	k, err := LocalWorkers(h, req, l.NNodes(), l.Slices)
	if err != nil {
		return nil, 0, nil, err
	}
	if plan, err = NewPlan(h, req, l.World(k, DefaultMegascalePort)); err != nil {
		return nil, 0, nil, err
	}
	return plan, l.NodeRank(), l, nil
}
