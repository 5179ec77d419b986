package rendezvous

// Node is one node of the agreed world.
type Node struct {
	Rank         int    `json:"rank"`
	Host         string `json:"host"`
	Addr         string `json:"addr"`
	Instance     string `json:"instance"`
	LocalWorkers int    `json:"local_workers"`
	SliceID      int    `json:"slice_id"`
	Role         string `json:"role,omitempty"`
	// FirstRank is the global rank of this node's local rank 0.
	FirstRank int `json:"first_rank"`
}

// Assignment is one node's share of the agreed world: what every node of the world shares (run id, generation,
// sizes, node 0's address and ports), the layout of every node's workers, and the nodes this node needs by name
// and address. It is identical on every node except NodeRank and Nodes, and its size does not grow with the
// world unless the world is one slice whose hosts a node must address (TPU_PROCESS_ADDRESSES).
type Assignment struct {
	NodeRank    int    `json:"node_rank"`
	RunID       string `json:"run_id"`
	Generation  int    `json:"generation"`
	Accelerator string `json:"accelerator"`
	// NNodes is the number of nodes of the world.
	NNodes int `json:"nnodes"`
	// WorldSize is the number of workers world-wide.
	WorldSize int `json:"world_size"`
	NumSlices int `json:"num_slices"`
	// MasterAddr is node 0's address; Ports are the ports node 0 picked.
	MasterAddr string         `json:"master_addr"`
	Ports      map[string]int `json:"ports,omitempty"`
	// MegascaleCoordinator is the address of host 0 of slice 0 (with node 0's PortMegascale when it picked one).
	MegascaleCoordinator string `json:"megascale_coordinator"`
	// Layout is every node's local workers, slice and role in node-rank order, as runs of consecutive nodes that
	// are alike: a world of uniform nodes is one Span, a multislice world one per slice. Global ranks, role ranks
	// and slice sizes follow from it (AllNodes).
	Layout []Span `json:"layout"`
	// Nodes are the nodes this node knows by name and address, in node-rank order: in a world of fixed slices
	// (every node a TPU host: no Member.UnevenWorkers) every node of this node's slice, else this node alone.
	Nodes []Node `json:"nodes"`
}

// Span is a run of consecutive nodes of an agreed world that run as many workers, in the same slice and role.
type Span struct {
	Nodes        int    `json:"nodes"`
	LocalWorkers int    `json:"local_workers"`
	SliceID      int    `json:"slice_id"`
	Role         string `json:"role,omitempty"`
}

// Self is this node's entry: its name, address, slice and first global rank.
func (a *Assignment) Self() Node {
	for _, n := range a.Nodes {
		if n.Rank == a.NodeRank {
			return n
		}
	}
	return a.AllNodes()[a.NodeRank] // a share always holds its own node; this is for a hand-made Assignment
}

// AllNodes is every node of the world in node-rank order, laid out from Layout (rank, first rank, workers, slice,
// role), with the name, address and instance of the nodes this share knows (Nodes) and none for the others.
func (a *Assignment) AllNodes() []Node {
	out := make([]Node, 0, a.NNodes)
	first := 0
	for _, sp := range a.Layout {
		for range sp.Nodes {
			out = append(out, Node{Rank: len(out), LocalWorkers: sp.LocalWorkers, SliceID: sp.SliceID, Role: sp.Role, FirstRank: first})
			first += sp.LocalWorkers
		}
	}
	for _, n := range a.Nodes {
		if n.Rank >= 0 && n.Rank < len(out) {
			out[n.Rank] = n
		}
	}
	return out
}

// Addrs lists the addresses of the nodes this share knows (Nodes), in node-rank order: on a world of fixed slices,
// this node's slice, from which TPU_WORKER_HOSTNAMES and TPU_PROCESS_ADDRESSES are built.
func (a *Assignment) Addrs() []string {
	out := make([]string, len(a.Nodes))
	for i, n := range a.Nodes {
		out[i] = n.Addr
	}
	return out
}

// MasterPort is node 0's PortMaster (0 when node 0 did not pick one).
func (a *Assignment) MasterPort() int { return a.Ports[PortMaster] }

// Clone is a copy of a that its receiver may change.
func (a *Assignment) Clone() *Assignment {
	c := *a
	c.Nodes = append([]Node(nil), a.Nodes...)
	c.Layout = append([]Span(nil), a.Layout...)
	c.Ports = map[string]int{}
	for k, v := range a.Ports {
		c.Ports[k] = v
	}
	return &c
}
