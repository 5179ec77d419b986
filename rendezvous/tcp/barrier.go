package tcp

import (
	"cmp"
	"fmt"
	"tpurun/rendezvous/internal/agree"

	"tpurun/rendezvous"
)

// barrier is one named barrier of a world: who arrived, and done, closed when the last node arrives or a node
// it waits for is gone (err).
type barrier struct {
	arrived []bool // by rank
	count   int
	done    chan struct{}
	over    bool
	err     error
}

func (b *barrier) end(err error) {
	if !b.over {
		b.over, b.err = true, err
		close(b.done)
	}
}

// barrierFor is the barrier name, made at its first arrival: failed at once when a node it needs is gone.
// With s.mu held.
func (w *world) barrierFor(name string) *barrier {
	b := w.barriers[name]
	if b == nil {
		b = &barrier{arrived: make([]bool, len(w.byRank)), done: make(chan struct{})}
		w.barriers[name] = b
		for _, r := range w.gone {
			b.end(w.lostErr(r, fmt.Sprintf("barrier %q cannot complete without it", name)))
			break
		}
	}
	return b
}

func (s *Server) barrier(c *sconn, w *world, rank int, m *message) error {
	s.mu.Lock()
	b := w.barrierFor(m.Name)
	if !b.arrived[rank] {
		b.arrived[rank] = true
		b.count++
	}
	if b.count == len(b.arrived) {
		b.end(nil)
	}
	s.mu.Unlock()
	ok, err := s.wait(c, b.done, s.timeout(m))
	if err != nil || ok {
		return cmp.Or(err, b.err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.over { // ended as the timeout passed
		return b.err
	}
	var late []rendezvous.NodeRef
	for r, e := range w.byRank {
		if !b.arrived[r] {
			late = append(late, e.m.Ref(r))
		}
	}
	return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("barrier %q: these nodes did not reach it in time", m.Name), late...)
}
