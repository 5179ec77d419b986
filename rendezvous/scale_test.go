package rendezvous_test

import (
	"context"
	"sync"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/tcp"
)

// TestWorldOfMany: 128 CPU or GPU hosts form a tcp world and pass two barriers; one whose launcher dies (its
// connection drops, as when it is SIGKILLed) is reported lost to each of the 127 others, once, and named by the
// next barrier, and nobody else is reported lost. The server wakes only the waiters an event concerns (a barrier's
// waiters at its last arrival, not at every arrival). 128, not the 512 it was written for: 512 took 11 to 18 s of
// the suite under -race, and pod sizes are the benchmarks' (BenchmarkRendezvous4096TCP and the held world).
//
// The nodes share this process, which a loaded machine and the race detector slow down many times: a node's
// pings then wait for the CPU the others use, where a real host has its own. So the heartbeat is past the
// deadline: a killed launcher's connection drops at once, and that is what is tested here (silence is
// TestNodeProcessFrozen's, a stalled server TestServerProcessStalled's, a world held at pod scale the benchmarks').
func TestWorldOfMany(t *testing.T) {
	testutil.Heavy(t) // a world of 128 nodes
	const n = 128
	c := rdzvtest.NewCluster(t, tcp.Name, n)
	c.HB = rdzvtest.Never()
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		m.UnevenWorkers, m.LocalWorkers, m.Accelerator = true, 8, "gpu"
	}
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	seen := map[int]bool{}
	for i, s := range c.Sess {
		a := s.Assignment()
		if seen[a.NodeRank] || a.NNodes != n || a.Self().Host != rdzvtest.HostName(i) {
			t.Fatalf("node %d: node rank %d (seen: %v), %d nodes, self %+v", i, a.NodeRank, seen[a.NodeRank], a.NNodes, a.Self())
		}
		seen[a.NodeRank] = true
	}
	barrier := func(name string, who []int) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for _, i := range who {
			wg.Go(func() { errs[i] = c.Sess[i].Barrier(ctx, name) })
		}
		wg.Wait()
		return errs
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for _, name := range []string{"one", "two"} {
		for i, err := range barrier(name, all) {
			if err != nil {
				t.Fatalf("node %d, barrier %q: %v", i, name, err)
			}
		}
	}
	const dead = n * 3 / 5 // neither the server's node nor the last to join
	rank := c.Sess[dead].Assignment().NodeRank
	c.Sess[dead].Close() // without Leave: its connection drops, as when its launcher is killed
	var rest []int
	for i := range n {
		if i != dead {
			rest = append(rest, i)
		}
	}
	for _, i := range rest {
		if f := rdzvtest.WaitFailure(t, c.Sess[i]); !f.Lost || f.Node.Rank != rank || f.Node.Host != rdzvtest.HostName(dead) {
			t.Fatalf("node %d heard %+v, want node rank %d (%s) lost", i, f, rank, rdzvtest.HostName(dead))
		}
	}
	errs := barrier("three", rest)
	for _, i := range rest {
		if err := errs[i]; err != nil {
			if e := rdzvtest.LostErr(t, err); e.Node.Rank != rank || e.Generation != 0 {
				t.Fatalf("node %d, barrier after the loss: %v, want node rank %d lost", i, e, rank)
			}
			continue
		}
		t.Fatalf("node %d passed a barrier without node rank %d", i, rank)
	}
	// by the time the barrier failed, each node had heard one failure: the dead node's
	for _, i := range rest {
		select {
		case f := <-c.Sess[i].Failures():
			t.Fatalf("node %d heard a second failure: %+v", i, f)
		default:
		}
	}
}
