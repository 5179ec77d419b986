package topology

import (
	"cmp"
	"strconv"

	"tpurun/internal/failure"
)

// Node is one host of the world.
type Node struct {
	Rank         int    `json:"rank"`
	Host         string `json:"host"`
	LocalWorkers int    `json:"local_workers"`
}

// Worker is one process of the world: who it is, which replicas (device ordinals) it owns and the environment the
// plan decides for it (the launcher adds run-time values on top).
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
	// IsolateGPUs gives GPU worker i CUDA_VISIBLE_DEVICES=<its GPU> alone; off (as torchrun), every worker sees
	// every usable GPU.
	IsolateGPUs bool

	// Hosts, when non-nil, are the agreed node addresses in node-rank order (a rendezvous result), replacing the
	// detected ones; NodeRank says which one this is.
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

// NewPlan is the one way to plan: the plan of the world w for the detected host and the request, validated against
// it. The zero World is this host alone as detected (a multi-host slice's plan covers the whole slice): one worker
// per chip by default (per GPU; one on CPU). It is pure: (*Plan).CheckPorts checks the ports before the start.
// Errors are *failure.ConfigError.
func NewPlan(h *Host, req Request, w World) (*Plan, error) {
	if !w.Solo() {
		return worldPlan(h, req, w)
	}
	req.NProcsSource = cmp.Or(req.NProcsSource, Flag("nprocs"))
	if req.NProcs < 0 {
		return nil, &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(req.NProcs), Problem: "is negative", Sources: sources{req.NProcsSource}, Hint: "leave it unset for one process per device"}
	}
	return h.Device.V.Kind().plan(h, req)
}

// JAX reads the first two in jax.distributed.initialize(), but no process id or count from the environment: the
// launcher sets the conventional names of both, which programs pass on themselves (docs/TOPOLOGY.md).
const (
	EnvJAXCoordinator    = "JAX_COORDINATOR_ADDRESS"
	EnvJAXLocalDeviceIDs = "JAX_LOCAL_DEVICE_IDS"
	EnvJAXProcessID      = "JAX_PROCESS_ID"    // = RANK
	EnvJAXNumProcesses   = "JAX_NUM_PROCESSES" // = WORLD_SIZE
)

// SetJAXCoordinator sets JAX_COORDINATOR_ADDRESS=hostport (node 0's address and a port every node agreed on, not
// MASTER_PORT, which torch's TCPStore binds) on every worker of p with an env whose kind needs it (not TPU: JAX's
// cloud-TPU detection finds host 0 itself).
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

// SoloNode is this host's node in NewPlan(h, req, World{}): TPU_WORKER_ID on a described multi-host slice, else 0
// (0 too for a one-chip run).
func SoloNode(h *Host, req Request) int { return h.Device.V.Kind().soloNode(h, req) }
