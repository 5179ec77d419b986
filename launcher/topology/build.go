package topology

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultTPUPortBase is the first TPU_PROCESS_PORT by convention.
const DefaultTPUPortBase = 8476

// Request is what the user asked of the plan: how many processes, SPMD, ports, and (after a rendezvous) the agreed
// hosts and this node's rank.
type Request struct {
	NProcs       int    // --nprocs; 0 = unset (one process per chip / GPU; 1 on CPU)
	NProcsSource Source // where NProcs came from; zero means Flag("nprocs")
	SPMD         bool   // --spmd (XLA_USE_SPMD from env is in Host.SPMD)
	TPUPortBase  int    // --tpu-port-base; 0 = 8476

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

// NewPlan builds the plan for the detected host: one worker per chip by default (per GPU; one on CPU), every
// worker's device and topology env, validated against the request. Multi-host slices (hosts from env, metadata or
// req.Hosts) give a plan covering the whole slice. It is pure: TPU_PROCESS_PORTs are base + local rank, and
// (*Plan).CheckPorts checks them before the start. Errors are *ConfigError.
func NewPlan(h *Host, req Request) (*Plan, error) {
	if !req.NProcsSource.IsSet() {
		req.NProcsSource = Flag("nprocs")
	}
	if req.NProcs < 0 {
		return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(req.NProcs), Problem: "is negative", Sources: []Source{req.NProcsSource}, Hint: "leave it unset for one process per device"}
	}
	switch h.Device.V {
	case TPU:
		return tpuPlan(h, req)
	case GPU:
		return gpuPlan(h, req)
	default:
		return cpuPlan(h, req)
	}
}

func cpuPlan(h *Host, req Request) (*Plan, error) {
	n := req.NProcs
	if n == 0 {
		n = 1
	}
	p, err := CPUPlan(n)
	if err != nil {
		return nil, err
	}
	for i := range p.Workers {
		p.Workers[i].Env["CPU_NUM_DEVICES"] = "1"
	}
	return p, nil
}

func gpuPlan(h *Host, req Request) (*Plan, error) {
	gpus := h.UsableGPUs.V
	n := req.NProcs
	if n == 0 {
		n = len(gpus)
	}
	if n > len(gpus) {
		return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(n), Problem: fmt.Sprintf("is more than the %d GPUs this launcher may use", len(gpus)),
			Sources: []Source{req.NProcsSource, h.UsableGPUs.Source}, Choices: countChoices(len(gpus)), Hint: "or leave it unset"}
	}
	p := &Plan{Device: GPU, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := 0; i < n; i++ {
		p.Workers = append(p.Workers, Worker{Rank: i, LocalRank: i, Replicas: []int{i}, Env: map[string]string{
			"PJRT_DEVICE":              "CUDA",
			"PJRT_LOCAL_PROCESS_RANK":  strconv.Itoa(i),
			"PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(n),
			"CUDA_VISIBLE_DEVICES":     strconv.Itoa(gpus[i]),
			"GPU_NUM_DEVICES":          strconv.Itoa(n),
		}})
	}
	return p, nil
}

func countChoices(n int) []string {
	out := make([]string, 0, n)
	for i := 1; i <= n && i <= 8; i++ {
		out = append(out, strconv.Itoa(i))
	}
	if n > 8 {
		out = append(out, "... "+strconv.Itoa(n))
	}
	return out
}

// Slice is the agreed description of a TPU slice from which every worker's env follows: what a rendezvous step
// settles before it calls (Slice).Plan.
type Slice struct {
	Accelerator        string // TPU_ACCELERATOR_TYPE; "" when unknown
	Hosts              []string
	NodeRank           int // this host's index in Hosts
	ProcsPerHost       int
	ChipsPerHostBounds Bounds
	HostBounds         Bounds
	ProcessBounds      Bounds // the process grid of the whole slice
	ChipsPerProcess    Bounds
	VisibleChips       []int // local chip indices: one per process, or all for SPMD
	ReplicasPerProcess int
	SPMD               bool
	PortBase           int // every host's TPU_PROCESS_PORT is PortBase + local rank
	Megascale          map[string]string
}

// Plan builds the world plan of the slice: every host's workers, with the env of TPU_FACTS.md.
func (s Slice) Plan() *Plan {
	p := &Plan{Device: TPU}
	k := s.ProcsPerHost
	var addrs []string
	for n, host := range s.Hosts {
		p.Nodes = append(p.Nodes, Node{Rank: n, Host: host, LocalWorkers: k})
		for lr := 0; lr < k; lr++ {
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(s.port(lr))))
		}
	}
	for n := range s.Hosts {
		for lr := 0; lr < k; lr++ {
			rank := n*k + lr
			env := map[string]string{
				"PJRT_DEVICE":                  "TPU",
				"PJRT_LOCAL_PROCESS_RANK":      strconv.Itoa(lr),
				"PJRT_LOCAL_PROCESS_COUNT":     strconv.Itoa(k),
				"TPU_CHIPS_PER_PROCESS_BOUNDS": s.ChipsPerProcess.String(),
				"TPU_PROCESS_BOUNDS":           s.ProcessBounds.String(),
				"CLOUD_TPU_TASK_ID":            strconv.Itoa(rank),
				"TPU_HOST_BOUNDS":              s.HostBounds.String(),
				"TPU_CHIPS_PER_HOST_BOUNDS":    s.ChipsPerHostBounds.String(),
				"TPU_WORKER_ID":                strconv.Itoa(n),
				"TPU_WORKER_HOSTNAMES":         strings.Join(s.Hosts, ","),
				"TPU_SKIP_MDS_QUERY":           "1",
			}
			if s.Accelerator != "" {
				env["TPU_ACCELERATOR_TYPE"] = s.Accelerator
			}
			var replicas []int
			if s.SPMD {
				env["XLA_USE_SPMD"] = "1"
				replicas = []int{n}
				if len(s.VisibleChips) > 0 {
					env["TPU_VISIBLE_CHIPS"] = joinInts(s.VisibleChips, ",")
				}
			} else {
				env["TPU_VISIBLE_CHIPS"] = strconv.Itoa(s.VisibleChips[lr])
				env["TPU_PROCESS_PORT"] = strconv.Itoa(s.port(lr))
				env["TPU_PROCESS_ADDRESSES"] = strings.Join(addrs, ",")
				for r := 0; r < s.ReplicasPerProcess; r++ {
					replicas = append(replicas, rank*s.ReplicasPerProcess+r)
				}
			}
			if k > 1 {
				env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
			}
			for key, v := range s.Megascale {
				env[key] = v
			}
			p.Workers = append(p.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: replicas, Env: env})
		}
	}
	return p
}

func (s Slice) port(lr int) int {
	if s.PortBase == 0 {
		return DefaultTPUPortBase + lr
	}
	return s.PortBase + lr
}

// Slice validates the request against the host and returns the agreed-slice description that Plan turns into env.
func (h *Host) Slice(req Request) (*Slice, error) {
	if h.Device.V != TPU {
		return nil, &ConfigError{Name: "device", Value: string(h.Device.V), Problem: "is not a TPU; a slice needs TPU chips", Sources: []Source{h.Device.Source}}
	}
	spmd, spmdSrc := req.SPMD, Flag("spmd")
	if !spmd && h.SPMD.V {
		spmd, spmdSrc = true, h.SPMD.Source
	}
	hosts, hostsSrc, node := []string{"localhost"}, Default(), 0
	switch {
	case req.Hosts != nil:
		hosts, hostsSrc, node = req.Hosts, Derived("rendezvous"), req.NodeRank
	case h.Hostnames.IsSet():
		hosts, hostsSrc, node = h.Hostnames.V, h.Hostnames.Source, h.WorkerID.V
	}
	if len(hosts) == 0 || node < 0 || node >= len(hosts) {
		return nil, &ConfigError{Name: "node rank", Value: strconv.Itoa(node), Problem: fmt.Sprintf("is not an index of the %d hosts", len(hosts)),
			Sources: []Source{hostsSrc}, Choices: indexChoices(len(hosts))}
	}
	if a := h.Accelerator; a.IsSet() && a.V.Hosts() != len(hosts) && (len(hosts) > 1 || a.V.Hosts() > 1) {
		return nil, &ConfigError{Name: "accelerator type", Value: a.V.Type,
			Problem: fmt.Sprintf("has %d hosts but %d are listed", a.V.Hosts(), len(hosts)), Sources: []Source{a.Source, hostsSrc},
			Hint: "list every host of the slice, or fix the accelerator type"}
	}
	multi := len(hosts) > 1
	usable := h.Usable.V
	n := len(usable)
	desc := fmt.Sprintf("%d %s chips", n, familyLabel(h.Family))
	sources := []Source{h.Usable.Source}

	if n == 0 {
		return nil, &ConfigError{Name: "chips", Value: "0", Problem: "no TPU chip is usable on this host", Sources: sources}
	}
	if _, err := ChipBounds(n); err != nil {
		return nil, subsetError(h)
	}
	k := req.NProcs
	s := &Slice{Hosts: hosts, NodeRank: node, SPMD: spmd, Accelerator: h.Accelerator.V.Type, Megascale: map[string]string{}}
	for key, v := range h.Megascale {
		s.Megascale[key] = v.V
	}
	s.ChipsPerHostBounds = h.ChipsPerHostBounds.V
	s.HostBounds = h.HostBounds.V
	if s.HostBounds == nil {
		s.HostBounds = Bounds{1, 1, len(hosts)}
	}
	if s.ChipsPerHostBounds == nil {
		s.ChipsPerHostBounds, _ = ChipBounds(n)
	}
	// envLimit: TPU_NUM_DEVICES or TPU_VISIBLE_CHIPS limited the usable chips, so nprocs must match their count.
	envLimit := h.NumDevices.IsSet() || h.VisibleChips.IsSet()
	if spmd {
		if k > 1 {
			return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(k),
				Problem: "contradicts SPMD, which runs ONE process per host that sees all local chips", Sources: []Source{req.NProcsSource, spmdSrc},
				Choices: []string{"1"}, Hint: "leave nprocs unset, or drop --spmd / XLA_USE_SPMD"}
		}
		k = 1
		s.ChipsPerProcess, _ = ChipBounds(n)
		s.ChipsPerHostBounds = subsetChipBounds(s.ChipsPerHostBounds, n, len(h.Chips))
		if n < len(h.Chips) {
			s.VisibleChips = usable
		}
		s.ProcessBounds = s.HostBounds
		s.ReplicasPerProcess = 1
	} else {
		if k == 0 {
			k = n
		}
		if envLimit && k != n {
			// Compared once with the final usable count (TPU_VISIBLE_CHIPS limited by TPU_NUM_DEVICES), which is a
			// valid subset by the check above: nprocs must use exactly the chips the env gives.
			src := []Source{req.NProcsSource, h.Usable.Source}
			if h.VisibleChips.IsSet() && h.NumDevices.IsSet() {
				src = append(src, h.VisibleChips.Source)
			}
			return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(k),
				Problem: fmt.Sprintf("contradicts %s, which gives this launcher %d chips", h.Usable.Source.Name, n), Sources: src,
				Choices: []string{strconv.Itoa(n)}, Hint: "or leave nprocs unset, or change " + h.Usable.Source.Name}
		}
		if multi && k != n {
			return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(k),
				Problem: fmt.Sprintf("does not match the %s on each host of this %d-host slice", desc, len(hosts)), Sources: append(sources, hostsSrc),
				Choices: []string{strconv.Itoa(n)}, Hint: "or leave it unset (a multi-host slice runs one process per chip on every host)"}
		}
		if k > n {
			return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(k),
				Problem: fmt.Sprintf("is more than the %s on this host", desc), Sources: sources, Choices: splitChoices(n), Hint: "or leave it unset"}
		}
		if !validSplit(k, n) {
			return nil, &ConfigError{Name: "nprocs", Value: strconv.Itoa(k),
				Problem: fmt.Sprintf("is not a valid split of the %s on this host", desc), Sources: sources, Choices: splitChoices(n), Hint: "or leave it unset"}
		}
		s.ChipsPerProcess = Bounds{1, 1, 1}
		s.VisibleChips = usable[:k]
		s.ChipsPerHostBounds = subsetChipBounds(s.ChipsPerHostBounds, k, len(h.Chips))
		s.ReplicasPerProcess = h.ReplicasPerChip
		if s.ReplicasPerProcess < 1 {
			s.ReplicasPerProcess = 1
		}
		if multi {
			s.ProcessBounds = s.HostBounds.Mul(s.ChipsPerHostBounds)
		} else {
			s.ProcessBounds, _ = ChipBounds(k)
		}
		if h.Family == "tpu7x" {
			// torch_xla appends a core dimension for generation 7 (TPU_FACTS.md: unverified in practice).
			s.ProcessBounds = append(append(Bounds(nil), s.ProcessBounds...), 2)
		}
	}
	s.ProcsPerHost = k
	if h.ProcessBounds.IsSet() {
		// Compared with the bounds tpurun computes, by process count: a given grid of the same size is kept as
		// given. Generation 7's trailing core dimension (which tpurun itself writes) counts no processes.
		given := h.ProcessBounds.V
		procs, core := given.Product(), ""
		if h.Family == "tpu7x" && len(given) == 4 {
			procs, core = given[:3].Product(), " (the trailing core dimension of tpu7x not counted)"
		}
		if want := k * len(hosts); procs != want {
			return nil, &ConfigError{Name: "TPU_PROCESS_BOUNDS", Value: given.String(),
				Problem: fmt.Sprintf("has %d processes%s but the plan runs %d (%d per host on %d hosts)", procs, core, want, k, len(hosts)),
				Sources: []Source{h.ProcessBounds.Source, req.NProcsSource, h.Usable.Source}, Hint: "unset TPU_PROCESS_BOUNDS (tpurun sets it per worker) or make nprocs match it"}
		}
		s.ProcessBounds = given
	}
	return s, nil
}

// subsetChipBounds is TPU_CHIPS_PER_HOST_BOUNDS for a run that uses `used` of the host's `total` chips: the host's
// bounds when every chip is used, else the chip grid of the subset, so that process bounds = host bounds x
// chips-per-host bounds holds for subsets too (TPU_FACTS.md). Unverified against libtpu: whether libtpu wants the
// subset's grid or the full host's here is not documented; this is the one place to change if it wants the host's.
func subsetChipBounds(host Bounds, used, total int) Bounds {
	if used >= total || host.Product() == used {
		return host
	}
	if b, err := ChipBounds(used); err == nil {
		return b
	}
	return host
}

// subsetError is the refusal of a usable chip count that has no chip grid, naming where the count came from and
// the env settings that fix it.
func subsetError(h *Host) error {
	n, total := len(h.Usable.V), len(h.Chips)
	var choices []string
	fix := 0 // the largest valid subset below n, for the example
	for _, c := range []int{1, 2, 4, 8} {
		if c <= total {
			choices = append(choices, strconv.Itoa(c))
			if c < n {
				fix = c
			}
		}
	}
	if fix == 0 {
		fix = 1
	}
	keep := h.Usable.V
	if len(keep) > fix {
		keep = keep[:fix]
	}
	sources := []Source{h.Usable.Source}
	if h.NumDevices.IsSet() && h.VisibleChips.IsSet() {
		sources = append(sources, h.VisibleChips.Source)
	}
	return &ConfigError{Name: fmt.Sprintf("%d usable chips", n),
		Problem: fmt.Sprintf("is not a valid subset of this %d-chip host", total), Sources: sources,
		Choices: choices, Hint: fmt.Sprintf("e.g. TPU_VISIBLE_CHIPS=%s or TPU_NUM_DEVICES=%d", joinInts(keep, ","), fix)}
}

func familyLabel(f string) string {
	switch f {
	case "v5litepod":
		return "v5e"
	case "":
		return "TPU"
	}
	return f
}

// tpuPlan validates and builds the slice plan; every TPU_PROCESS_PORT is the base + the local rank.
func tpuPlan(h *Host, req Request) (*Plan, error) {
	s, err := h.Slice(req)
	if err != nil {
		return nil, err
	}
	s.PortBase = req.TPUPortBase
	if s.PortBase == 0 {
		s.PortBase = DefaultTPUPortBase
	}
	return s.Plan(), nil
}
