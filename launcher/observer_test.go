package launcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/launcher"
)

// rendezvousEvents counts the RendezvousDone events of one node and keeps their durations.
type rendezvousEvents struct {
	mu    sync.Mutex
	times []time.Duration
}

func (r *rendezvousEvents) Observe(e spec.Event) {
	if e.Kind == spec.RendezvousDone {
		r.mu.Lock()
		r.times = append(r.times, e.Rendezvous)
		r.mu.Unlock()
	}
}

func (r *rendezvousEvents) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.times...)
}

// TestRendezvousDoneOnlyWhereNodesMeet: a single host, a world of one, does not rendezvous: over two generations (a
// failure and a restart) it reports no RendezvousDone, so the status endpoint's tpurun_rendezvous_seconds stays 0
// as the README says (it showed the microseconds of a join with nobody, 3.7e-06). Two nodes report one join each,
// of some duration.
func TestRendezvousDoneOnlyWhereNodesMeet(t *testing.T) {
	t.Parallel()
	t.Run("one host", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		cfg, _, _ := config(t, 1, dir, "exit:3")
		cfg.MaxRestarts = 1
		var ev rendezvousEvents
		cfg.Observers = []spec.Observer{&ev}
		rep, _ := launcher.RunInternal(context.Background(), cfg)
		if len(rep.Attempts) != 2 {
			t.Fatalf("%d attempts, want 2 (the failure and its restart)", len(rep.Attempts))
		}
		if got := ev.got(); len(got) != 0 {
			t.Fatalf("a world of one reported %d rendezvous %v, want none", len(got), got)
		}
	})
	t.Run("two nodes", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, 2, "tcp", "exit:0")
		evs := []*rendezvousEvents{{}, {}}
		for i := range w.specs {
			w.specs[i].Observers = []spec.Observer{evs[i]}
		}
		_, errs := w.run()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
			if got := evs[i].got(); len(got) != 1 || got[0] <= 0 {
				t.Errorf("node %d reported the rendezvous %v, want one join of some duration", i, got)
			}
		}
		testutil.AssertAllGone(t, w.dir, 4)
	})
}
