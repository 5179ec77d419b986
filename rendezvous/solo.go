package rendezvous

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
)

// soloBackend is the world of one (Config.Backend ""): this node alone. It has no store: every generation agrees at
// once on the member as given, the barrier is open, the exchange returns what this node published, and no other
// node can fail.
type soloBackend struct{}

func (soloBackend) Solo() bool { return true }

func (soloBackend) Elastic() bool { return false }

func (soloBackend) NeedsHosts(*Config) bool { return false }

func (soloBackend) NamesNodes(*Config) bool { return false }

func (soloBackend) HostsServer() bool { return false }

func (soloBackend) Port() int { return DefaultPort }

// Open refuses a world of more than one node; there is nothing to prepare.
func (soloBackend) Open(_ context.Context, cfg *Config, _ *zap.Logger, _ time.Duration) (Store, error) {
	if cfg.NNodes > 1 {
		return nil, configError(failure.RendezvousNodes, strconv.Itoa(cfg.NNodes), "a world of one node; name a backend ("+Names()+") for more")
	}
	if cfg.NodeRank > 0 {
		return nil, configError(failure.RendezvousNodeRank, strconv.Itoa(cfg.NodeRank), "a world of one node has only node rank 0")
	}
	return soloStore{}, nil
}

// soloStore joins the world of one.
type soloStore struct{}

func (soloStore) Join(_ context.Context, m Member, _ *zap.Logger) (Session, error) {
	asg := &Assignment{NodeRank: 0, RunID: m.RunID, Generation: m.Generation, Accelerator: m.Accelerator,
		NNodes: 1, WorldSize: m.LocalWorkers, NumSlices: 1, Layout: []Span{{Nodes: 1, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}},
		Nodes: []Node{{Rank: 0, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}}}
	return &soloSession{asg: asg, published: map[string][]byte{}, failures: make(chan Failure), done: make(chan struct{})}, nil
}

func (soloStore) Endpoint() string { return "" }

func (soloStore) Hosts() []string { return nil }

func (soloStore) Close() error { return nil }

// soloSession is one generation of the world of one.
type soloSession struct {
	asg       *Assignment
	mu        sync.Mutex
	published map[string][]byte
	failures  chan Failure
	done      chan struct{}
	closeOnce sync.Once
}

func (s *soloSession) Assignment() *Assignment { return s.asg.Clone() }

func (s *soloSession) Barrier(context.Context, string) error { return nil }

func (s *soloSession) Fail(context.Context, Failure) error { return nil }

func (s *soloSession) Failures() <-chan Failure { return s.failures }

func (s *soloSession) Waiting(context.Context) (int, error) { return 0, nil }

func (s *soloSession) Finish(context.Context, int) error { return nil }

func (s *soloSession) Leave(context.Context) error { return nil }

func (s *soloSession) Done() <-chan struct{} { return s.done }

func (s *soloSession) Publish(_ context.Context, key string, data []byte) error {
	s.mu.Lock()
	s.published[key] = data
	s.mu.Unlock()
	return nil
}

func (s *soloSession) Gather(_ context.Context, key string) (map[int][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[int][]byte{0: s.published[key]}, nil
}

func (s *soloSession) Err() error {
	select {
	case <-s.done:
		return newError(ErrClosed, "session closed")
	default:
		return nil
	}
}

func (s *soloSession) Close() error {
	s.closeOnce.Do(func() {
		close(s.failures)
		close(s.done)
	})
	return nil
}
