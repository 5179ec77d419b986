package tcp

import (
	"fmt"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// The job a server serves, and the nodes of another: a server is hosted by a node of one job (node 0), whose run
// id it serves from the node's first join (before it, any). A node that reaches it with another run id
// (a node of a previous attempt of a restarted JobSet, or one left over from an earlier run), or asks for a
// generation the job has left behind, is a straggler: it is refused alone, at once, and the world of the job
// forms without it, as torchrun's c10d lets the job's nodes form their world and fails only the straggler.

// serveRunID makes id the run id the server serves: the one its own node (node 0) joins with.
func (s *Server) serveRunID(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runID = id
}

// straggler is the error that refuses mem alone when it belongs to another job than the one the server serves,
// or to a generation the job has left behind; nil for a node of the job. With s.mu held.
func (s *Server) straggler(mem *rendezvous.Member) error {
	if s.runID != "" && mem.RunID != s.runID {
		s.log.Warn("rendezvous: a node of another job refused", zap.String("run_id", mem.RunID), zap.String("serving_run_id", s.runID),
			zap.String("host", mem.Host), zap.String("instance", mem.Instance))
		return &rendezvous.Error{Kind: rendezvous.ErrMismatch, Nodes: []rendezvous.NodeRef{mem.Ref(mem.Rank)}, Field: string(failure.RendezvousRunID), Value: mem.RunID,
			Detail: fmt.Sprintf("this node's run id %q is not %q, the run id of the job this rendezvous serves (its node 0's): it is a node of another job "+
				"(of a previous attempt of a restarted JobSet, or left over from an earlier run), refused alone; the job %q goes on without it. "+
				"Give every node of one job the same run id (--rdzv-id), or stop this one", mem.RunID, s.runID, s.runID)}
	}
	g := mem.Generation
	if g >= 0 && g < s.latest && s.worlds[g] == nil {
		return agree.NewError(rendezvous.ErrWorldFull, fmt.Sprintf("generation %d is behind the job %q, which is at generation %d: this node is a straggler of an earlier "+
			"attempt, refused alone; join the latest generation, or stop it", g, s.runID, s.latest), mem.Ref(mem.Rank))
	}
	return nil
}
