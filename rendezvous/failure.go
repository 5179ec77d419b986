package rendezvous

import (
	"fmt"
	"time"
)

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

// Stamped is f with its time set to now when it has none.
func (f Failure) Stamped() Failure {
	if f.At.IsZero() {
		f.At = time.Now()
	}
	return f
}
