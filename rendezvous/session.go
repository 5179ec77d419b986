package rendezvous

import (
	"context"
	"sync"
	"time"
)

// membership is one node's part in one generation, on a backend: what a Session delegates to.
type membership interface {
	barrier(ctx context.Context, name string) error
	publish(ctx context.Context, key string, data []byte) error
	gather(ctx context.Context, key string) (map[int][]byte, error)
	fail(ctx context.Context, f Failure) error
	leave(ctx context.Context) error
	waiting(ctx context.Context) (int, error)
	finish(ctx context.Context, code int) error
	failures() <-chan Failure
	done() <-chan struct{}
	err() error
	close() error
}

// Session is one node's membership in one generation.
type Session struct {
	asg  *Assignment
	b    membership
	once sync.Once
}

// Assignment is the agreed world (a copy).
func (s *Session) Assignment() *Assignment {
	a := *s.asg
	a.Nodes = append([]Node(nil), s.asg.Nodes...)
	a.Ports = map[string]int{}
	for k, v := range s.asg.Ports {
		a.Ports[k] = v
	}
	return &a
}

// Barrier returns when every node has reached the barrier name, or fails with a *NodeLostError or ErrTimeout
// naming the nodes concerned.
func (s *Session) Barrier(ctx context.Context, name string) error { return s.b.barrier(ctx, name) }

// Publish stores data under key for this node.
func (s *Session) Publish(ctx context.Context, key string, data []byte) error {
	return s.b.publish(ctx, key, data)
}

// Gather waits until every node has published key and returns the data by node rank; a node gone without
// publishing fails it with a *NodeLostError.
func (s *Session) Gather(ctx context.Context, key string) (map[int][]byte, error) {
	return s.b.gather(ctx, key)
}

// Fail tells every other node that this node failed; they hear it on Failures.
func (s *Session) Fail(ctx context.Context, f Failure) error {
	if f.At.IsZero() {
		f.At = time.Now()
	}
	return s.b.fail(ctx, f)
}

// Failures delivers the failures of other nodes and the loss of nodes (or of the server). It is closed when the
// session ends.
func (s *Session) Failures() <-chan Failure { return s.b.failures() }

// Waiting is the number of nodes already in the next generation, waiting for this one to restart: a node that
// came back or a new one (joined with LatestGeneration), or one of this world that restarted first. An elastic
// launcher whose world is below its maximum may restart to take them in.
func (s *Session) Waiting(ctx context.Context) (int, error) { return s.b.waiting(ctx) }

// Finish closes the job (see the package doc's lifecycle): this session's generation is the job's last, and it
// ended with exit code code, the world's verdict. Every node of the final world calls it once the verdict is
// agreed and no restart follows, before Leave: the first call records the close, the others find it recorded.
// From then on every node waiting for a later generation, and every node that joins while the record lasts,
// gets a *JobClosedError.
func (s *Session) Finish(ctx context.Context, code int) error { return s.b.finish(ctx, code) }

// Done is closed when the session can no longer work: the rendezvous store is lost (the embedded server gone,
// etcd unreachable: within about two heartbeats) or the session was closed. Every call of the session waiting on
// the store returns then.
func (s *Session) Done() <-chan struct{} { return s.b.done() }

// Err is nil until Done is closed; then it says why: an error matching ErrStoreLost that names the store's
// endpoint, or ErrClosed.
func (s *Session) Err() error { return s.b.err() }

// Leave tells the others this node is done; its disappearance afterwards is not a failure.
func (s *Session) Leave(ctx context.Context) error { return s.b.leave(ctx) }

// Close ends the session (without Leave, the others see this node as lost).
func (s *Session) Close() error {
	var err error
	s.once.Do(func() { err = s.b.close() })
	return err
}
