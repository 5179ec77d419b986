package rendezvous

import "context"

// Session is one node's membership in one generation, as Rendezvous.Join returns it on every backend: the agreed
// world, barriers, an exchange of data, failures both ways, and the close of the job.
type Session interface {
	// Assignment is the agreed world (a copy).
	Assignment() *Assignment
	// Barrier returns when every node has reached the barrier name, or fails with a *NodeLostError or ErrTimeout
	// naming the nodes concerned.
	Barrier(ctx context.Context, name string) error
	// Publish stores data under key for this node.
	Publish(ctx context.Context, key string, data []byte) error
	// Gather waits until every node has published key and returns the data by node rank; a node gone without
	// publishing fails it with a *NodeLostError.
	Gather(ctx context.Context, key string) (map[int][]byte, error)
	// Fail tells every other node that this node failed (At defaults to now); they hear it on Failures.
	Fail(ctx context.Context, f Failure) error
	// Failures delivers the failures of other nodes and the loss of nodes (or of the server). It is closed when the
	// session ends.
	Failures() <-chan Failure
	// Waiting is the number of nodes already in the next generation, waiting for this one to restart: a node that
	// came back or a new one (joined with LatestGeneration), or one of this world that restarted first. An elastic
	// launcher whose world is below its maximum may restart to take them in.
	Waiting(ctx context.Context) (int, error)
	// Finish closes the job (see the package doc's lifecycle): this session's generation is the job's last, and it
	// ended with exit code code, the world's verdict. Every node of the final world calls it once the verdict is
	// agreed and no restart follows, before Leave: the first call records the close, the others find it recorded.
	// From then on every node waiting for a later generation, and every node that joins while the record lasts,
	// gets a *JobClosedError.
	Finish(ctx context.Context, code int) error
	// Done is closed when the session can no longer work: the rendezvous store is lost (the embedded server gone,
	// etcd unreachable: within about two heartbeats) or the session was closed. Every call of the session waiting
	// on the store returns then.
	Done() <-chan struct{}
	// Err is nil until Done is closed; then it says why: an error matching ErrStoreLost that names the store's
	// endpoint, or ErrClosed.
	Err() error
	// Leave tells the others this node is done; its disappearance afterwards is not a failure.
	Leave(ctx context.Context) error
	// Close ends the session (without Leave, the others see this node as lost). Calling it again does nothing.
	Close() error
}
