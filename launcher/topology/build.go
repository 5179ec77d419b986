package topology

import (
	"strconv"
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

// gpuPlan runs one worker per usable GPU (or nprocs of them). Like torchrun it leaves CUDA_VISIBLE_DEVICES to the
// parent unless req.IsolateGPUs: every worker sees the usable GPUs and uses cuda:LOCAL_RANK, which is also the
// device JAX_LOCAL_DEVICE_IDS names for jax.distributed.initialize().
func gpuPlan(h *Host, req Request) (*Plan, error) {
	gpus := h.UsableGPUs.V
	n := req.NProcs
	if n == 0 {
		n = len(gpus)
	}
	if len(gpus) == 0 { // detection refuses a GPU host without a usable GPU; a hand-made Host may have none
		return nil, &ConfigError{Name: "device", Value: "gpu", Problem: "has no usable GPU", Sources: []Source{h.UsableGPUs.Source}, Choices: []string{"--device cpu"}}
	}
	// More workers than GPUs is torchrun's too (gloo tests, several processes per GPU): worker i's GPU is
	// i mod the GPU count, and GPUShareNote says which ranks share.
	p := &Plan{Device: GPU, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := 0; i < n; i++ {
		env := map[string]string{
			"PJRT_DEVICE":              "CUDA",
			"PJRT_LOCAL_PROCESS_RANK":  strconv.Itoa(i),
			"PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(n),
			"GPU_NUM_DEVICES":          strconv.Itoa(n),
			EnvJAXLocalDeviceIDs:       strconv.Itoa(i % len(gpus)),
		}
		if req.IsolateGPUs {
			env["CUDA_VISIBLE_DEVICES"] = h.gpuName(i % len(gpus))
			env[EnvJAXLocalDeviceIDs] = "0"
		}
		p.Workers = append(p.Workers, Worker{Rank: i, LocalRank: i, Replicas: []int{i}, Env: env})
	}
	return p, nil
}

// gpuName is how CUDA_VISIBLE_DEVICES names usable GPU i: the parent's entry as given, else its index.
func (h *Host) gpuName(i int) string {
	if i < len(h.CUDAVisible.V) {
		return h.CUDAVisible.V[i]
	}
	return strconv.Itoa(h.UsableGPUs.V[i])
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
	if p.Device == TPU || hostport == "" {
		return
	}
	for i := range p.Workers {
		if p.Workers[i].Env != nil {
			p.Workers[i].Env[EnvJAXCoordinator] = hostport
		}
	}
}
