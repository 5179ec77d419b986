package launcher

import (
	"context"
	"sync"

	"tpurun/rendezvous"
)

// solo is the rendezvous of a world of one: this host alone, as detected. Every generation agrees at once, the
// barrier is open, the exchange returns what this node published, and no other node can fail.
type solo struct{}

func (*solo) Join(_ context.Context, m rendezvous.Member) (session, error) {
	return &soloSession{asg: &rendezvous.Assignment{NodeRank: 0, RunID: m.RunID, Generation: m.Generation,
		Accelerator: m.Accelerator, WorldSize: m.LocalWorkers, NumSlices: 1,
		Nodes: []rendezvous.Node{{Rank: 0, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers}}},
		published: map[string][]byte{}, failures: make(chan rendezvous.Failure)}, nil
}

func (*solo) Endpoint() string { return "" }
func (*solo) Close() error     { return nil }

type soloSession struct {
	asg       *rendezvous.Assignment
	mu        sync.Mutex
	published map[string][]byte
	failures  chan rendezvous.Failure
	closeOnce sync.Once
}

func (s *soloSession) Assignment() *rendezvous.Assignment             { return s.asg }
func (s *soloSession) Barrier(context.Context, string) error          { return nil }
func (s *soloSession) Fail(context.Context, rendezvous.Failure) error { return nil }
func (s *soloSession) Failures() <-chan rendezvous.Failure            { return s.failures }
func (s *soloSession) Leave(context.Context) error                    { return nil }
func (s *soloSession) Finish(context.Context, int) error              { return nil }

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

func (s *soloSession) Close() error {
	s.closeOnce.Do(func() { close(s.failures) })
	return nil
}
