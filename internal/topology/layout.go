package topology

import (
	"fmt"
	"net"
	"strings"
	"tpurun/internal/failure"
)

// JobLayout is the job this host's environment says it is one host of: its slice's hosts in worker order and its
// worker id, and in a multislice job (MEGASCALE_NUM_SLICES > 1) the slices, its slice and the coordinator's host.
// Every host derives the same world from it: node rank = slice id x hosts per slice + worker id, node 0 the
// coordinator's host, as JAX numbers a multislice job's processes on GKE (TPU_FACTS.md).
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

// String says where this host stands: "worker 1 of 2 (env TPU_WORKER_HOSTNAMES)", and its slice in a multislice job.
func (l *JobLayout) String() string {
	s := fmt.Sprintf("worker %d of %d (%s)", l.WorkerID, l.HostsPerSlice(), l.HostsSource)
	if l.Slices > 1 {
		s += fmt.Sprintf(" in slice %d of %d", l.SliceID, l.Slices)
	}
	return s
}

// JobLayout is the job this TPU host's environment describes, or nil when it describes no job of several hosts
// (not a TPU, one host of one slice, or a one-chip run, which is this host's alone). A multislice job without
// MEGASCALE_SLICE_ID or MEGASCALE_COORDINATOR_ADDRESS, or with a slice id out of range, is a *failure.ConfigError.
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

// megascaleLayout fills in the slices of a multislice job from the MEGASCALE_* values (env or tpu-env).
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
		return &failure.ConfigError{Kind: ErrConfig, Field: EnvMegascaleSliceID, Problem: fmt.Sprintf("is not set, but %s=%d makes this host one of a multislice job", EnvMegascaleNumSlices, slices),
			Sources: sources{n.Source}, Hint: "set it to this host's slice, from 0 (JobSet: the job-global-index label, through the downward API)"}
	}
	if l.SliceID, err = ParseMegascale(EnvMegascaleSliceID, id.V); err != nil {
		return err
	}
	if l.SliceID >= slices {
		return &failure.ConfigError{Kind: ErrConfig, Field: EnvMegascaleSliceID, Value: id.V, Problem: fmt.Sprintf("is not a slice of the %d", slices),
			Sources: sources{id.Source, n.Source}, Choices: indexChoices(slices)}
	}
	c, ok := t.Megascale[megascaleCoordinator]
	if !ok {
		return &failure.ConfigError{Kind: ErrConfig, Field: megascaleCoordinator, Problem: fmt.Sprintf("is not set, but %s=%d makes this host one of a multislice job whose hosts must all meet one coordinator", EnvMegascaleNumSlices, slices),
			Sources: sources{n.Source}, Hint: "set it on every host to the first host of slice 0 (JobSet: <jobset>-<job>-0-0.<subdomain>)"}
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

// Alone is h as a one-host slice of its own chips, for a deliberate single-host run (--nnodes 1, --standalone) on
// one host of a multi-host slice, so that nothing waits for the other hosts: no host list, worker 0, host bounds
// 1,1,1, the accelerator type this host's chips make alone (v4-8 for four v4 chips), no multislice variables.
func (h *Host) Alone() *Host {
	c := *h
	c.NodeHosts, c.NodeRank = Value[[]string]{}, Value[int]{}
	t, ok := h.state.(*TPUFacts)
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

// JobEnv are the variables that describe the job beyond this host, which the workers of a host running Alone must
// not inherit, or their runtime would wait for the other hosts.
func JobEnv() []string {
	return append([]string{"TPU_WORKER_HOSTNAMES", "HOST_BOUNDS"}, megascaleNames...)
}

// World is the job's world as this host alone can lay it out, before any rendezvous (what `tpurun plan` shows):
// every node of every slice with localWorkers workers, the other slices' hosts named <slice-S-worker-W>, and every
// slice's workers with their env (EverySlice).
func (l *JobLayout) World(localWorkers, megascalePort int) World {
	w := World{NodeRank: l.NodeRank(), NumSlices: l.Slices, MegascaleCoordinator: l.Coordinator, MegascalePort: megascalePort,
		EverySlice: true}
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

// JobPlan is the plan of the world this host's environment describes (JobLayout), this host's node in it and the
// layout; with no layout, l is nil and the plan and node are NewPlan's for the host as detected.
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
