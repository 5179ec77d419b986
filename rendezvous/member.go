package rendezvous

import (
	"fmt"
	"time"
)

// Member is what one node (one launcher process) brings to a rendezvous.
type Member struct {
	// Instance is random per launcher process (NewInstance); it tells a rejoin of the same process apart from a
	// second process claiming the same node.
	Instance string `json:"instance"`
	// Host is the node's identity (its hostname); two live instances may not share it.
	Host string `json:"host"`
	// Addr is the address other nodes reach this node at (IP or DNS name, no port).
	Addr string `json:"addr"`
	// LocalWorkers is the number of worker processes on this node; all nodes must agree unless every node sets
	// UnevenWorkers.
	LocalWorkers int `json:"local_workers"`
	// UnevenWorkers: this node accepts a world whose nodes run different numbers of workers (torchrun's CPU and
	// GPU worlds, ranks by node order); a TPU slice needs the same on every host.
	UnevenWorkers bool `json:"uneven_workers,omitempty"`
	// Accelerator is the accelerator type (e.g. "v4-32", "cpu"); all nodes must agree.
	Accelerator string `json:"accelerator"`
	// RunID names the job; all nodes must agree.
	RunID string `json:"run_id"`
	// Generation is 0 for the first rendezvous and +1 per restart; LatestGeneration joins the generation being
	// formed, or the next one when the latest is complete (a node that comes back, or a new one, waits there for
	// the others to restart the world). The Assignment says which generation was joined.
	Generation int `json:"generation"`
	// SliceID and NumSlices place the node in a multi-slice job (0 and 1 for a single slice).
	SliceID   int `json:"slice_id"`
	NumSlices int `json:"num_slices"`
	// Rank is the requested node rank, -1 for any.
	Rank int `json:"rank"`
	// Role is the role of this node's workers (torchrun's --role); nodes may differ, and the workers of one role
	// are counted together (ROLE_RANK, ROLE_WORLD_SIZE).
	Role string `json:"role,omitempty"`
	// Ports are the ports this node picked (PortMaster, PortCoordinator, PortMegascale); node 0's are used by all.
	Ports map[string]int `json:"ports,omitempty"`
}

// LatestGeneration as Member.Generation joins the generation being formed, or the one after the latest complete
// generation.
const LatestGeneration = -1

// The names of the ports node 0 picks and shares.
const (
	PortMaster      = "master"      // torchrun MASTER_PORT
	PortCoordinator = "coordinator" // JAX / PJRT coordinator
	PortMegascale   = "megascale"   // MEGASCALE_PORT
)

func (m *Member) Ref(rank int) NodeRef {
	return NodeRef{Rank: rank, Host: m.Host, Instance: m.Instance}
}

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

// Failure is one node's report that its part of the job failed, or the news that a node disappeared.
type Failure struct {
	Node NodeRef `json:"node"`
	// WorkerRank is the global rank of the worker that failed, -1 when not a worker.
	WorkerRank int `json:"worker_rank"`
	// Lost is true when the node itself disappeared (connection dropped, heartbeat missed, lease expired).
	Lost bool `json:"lost"`
	// Store is true when what was lost is the rendezvous store itself (node 0's server, etcd), not a node: Node.Host
	// is then the store's endpoint, and Reason says how (an ErrStoreLost error's words). Never on the wire.
	Store  bool   `json:"-"`
	Reason string `json:"reason"`
	// At is when the reporter saw it (wall clock, for humans only).
	At time.Time `json:"at"`
}

func (f Failure) String() string {
	if f.Store {
		return fmt.Sprintf("rendezvous store at %s lost: %s", f.Node.Host, f.Reason)
	}
	if f.Lost {
		return fmt.Sprintf("%s lost: %s", f.Node, f.Reason)
	}
	if f.WorkerRank >= 0 {
		return fmt.Sprintf("%s failed (worker rank %d): %s", f.Node, f.WorkerRank, f.Reason)
	}
	return fmt.Sprintf("%s failed: %s", f.Node, f.Reason)
}
