package topology

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
