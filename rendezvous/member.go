package rendezvous

import (
	"fmt"
	"strings"

	"tpurun/internal/failure"
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

// Ref names m as a node of rank rank, in an error or a failure.
func (m *Member) Ref(rank int) NodeRef {
	return NodeRef{Rank: rank, Host: m.Host, Instance: m.Instance}
}

// Validate checks what a node brings to a join; also applied by the server to every join it receives.
func (m *Member) Validate() error {
	if err := m.checkInstance(); err != nil {
		return err
	}
	if err := m.checkCounts(); err != nil {
		return err
	}
	if m.Host != "" {
		if why := hostProblem(m.Host); why != "" {
			return configError(failure.RendezvousHostName, m.Host, why)
		}
	}
	if m.RunID != "" {
		if err := ValidateRunID(m.RunID); err != nil {
			return err
		}
	}
	return nil
}

// checkInstance checks the member's instance id: 1..64 printable characters without '/'.
func (m *Member) checkInstance() error {
	switch {
	case m.Instance == "":
		return configError("instance", "", "a member needs an instance id; use NewInstance()")
	case len(m.Instance) > 64 || strings.ContainsFunc(m.Instance, func(r rune) bool { return r <= ' ' || r == '/' || r > '~' }):
		return configError("instance", m.Instance, "an instance id is at most 64 printable characters without '/'")
	}
	return nil
}

// checkCounts checks the member's numbers: its workers, generation, requested rank and slice.
func (m *Member) checkCounts() error {
	ref := m.Host
	if ref == "" {
		ref = m.Instance
	}
	switch {
	case m.LocalWorkers < 1:
		return newError(ErrConfig, fmt.Sprintf("member %s has %d local workers; need at least 1", ref, m.LocalWorkers))
	case m.Generation < LatestGeneration:
		return newError(ErrConfig, fmt.Sprintf("member %s has generation %d; need >= 0, or LatestGeneration", ref, m.Generation))
	case m.Rank < -1:
		return newError(ErrConfig, fmt.Sprintf("member %s requests node rank %d; use -1 for any", ref, m.Rank))
	case m.SliceID < 0 || m.NumSlices < 0 || (m.NumSlices > 0 && m.SliceID >= m.NumSlices):
		return newError(ErrConfig, fmt.Sprintf("member %s has slice id %d of %d slices", ref, m.SliceID, m.NumSlices))
	}
	return nil
}
