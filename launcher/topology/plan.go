package topology

import (
	"fmt"
	"strconv"
)

// Device is the kind of accelerator a plan runs on.
type Device string

// The devices a plan can run on; the strings are what PJRT_DEVICE takes (in upper case) and what --device takes.
const (
	CPU Device = "cpu"
	GPU Device = "gpu"
	TPU Device = "tpu"
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

// CPUPlan is the single-host plan of n CPU workers: the embedded default that needs no accelerator.
func CPUPlan(n int) (*Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("nprocs %d: need at least 1 worker", n)
	}
	p := &Plan{Device: CPU, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := 0; i < n; i++ {
		p.Workers = append(p.Workers, Worker{
			Rank: i, LocalRank: i, NodeRank: 0, Replicas: []int{i},
			Env: map[string]string{
				"PJRT_DEVICE":              "CPU",
				"PJRT_LOCAL_PROCESS_RANK":  strconv.Itoa(i),
				"PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(n),
			},
		})
	}
	return p, nil
}
