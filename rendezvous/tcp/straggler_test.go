package tcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// TestStragglersRefusedAlone: the node hosting the server waits in generation 1 of job "new" for its peer. A
// node of job "old" is refused at once, alone, with an ErrMismatch naming both run ids; a node of the job asking
// for generation 0, which the job left behind, is refused at once with ErrWorldFull; then the peer of generation 1
// joins and the world of "new" forms. Every join is bounded by the test's deadline only: a refusal that waited
// out the join timeout (Never) would fail it.
func TestStragglersRefusedAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline())
	defer cancel()
	ep := rdzvtest.FreeAddr(t)
	node := func(host, runID string, isHost bool) (*rendezvous.Rendezvous, rendezvous.Member) {
		return stragglerNode(ctx, t, ep, host, runID, isHost)
	}
	host, hm := node("new-0", "new", true)
	joined := make(chan error, 1)
	go func() {
		s, err := host.Join(ctx, hm)
		if err == nil {
			defer s.Close()
		}
		joined <- err
	}()
	srv := HostedServer(host)
	testutil.WaitFor(t, "the hosting node in generation 1", func() error {
		if srv.Joiners(1) != 1 {
			return errors.New("not yet")
		}
		return nil
	})

	old, om := node("old-1", "old", false)
	_, err := old.Join(ctx, om)
	if !runIDRefusal(err) {
		t.Fatalf("a node of another run id: %v; want an ErrMismatch about the run id naming \"old\" and \"new\"", err)
	}
	stale, sm := node("new-1", "new", false)
	sm.Generation = 0
	if _, err := stale.Join(ctx, sm); !errors.Is(err, rendezvous.ErrWorldFull) || !strings.Contains(err.Error(), "generation 0 is behind") {
		t.Fatalf("a node of a generation left behind: %v; want ErrWorldFull saying so", err)
	}

	peer, pm := node("new-1", "new", false)
	s, err := peer.Join(ctx, pm)
	if err != nil {
		t.Fatalf("the job's peer: %v", err)
	}
	defer s.Close()
	if err := <-joined; err != nil {
		t.Fatalf("the hosting node: %v", err)
	}
	if a := s.Assignment(); a.NNodes != 2 || a.RunID != "new" || a.Generation != 1 {
		t.Fatalf("world %+v, want the 2 nodes of job new in generation 1", a)
	}
}

// stragglerNode is a node of TestStragglersRefusedAlone: its Rendezvous on ep (hosting the server when isHost),
// closed at the test's end, and its member for generation 1.
func stragglerNode(ctx context.Context, t *testing.T, ep, host, runID string, isHost bool) (*rendezvous.Rendezvous, rendezvous.Member) {
	t.Helper()
	conf := map[string]string{"is_host": "false"}
	if isHost {
		conf["is_host"] = "true"
	}
	r, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Endpoint: ep, NNodes: 2, NodeRank: -1, RunID: runID, Timeout: rdzvtest.Never(), Conf: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, rendezvous.Member{Instance: rendezvous.NewInstance(), Host: host, Addr: "127.0.0.1", LocalWorkers: 1, Rank: -1, Generation: 1}
}

// runIDRefusal reports whether err refuses a node of run id "old" at the server of job "new", naming both.
func runIDRefusal(err error) bool {
	var re *rendezvous.Error
	return errors.As(err, &re) && errors.Is(err, rendezvous.ErrMismatch) && re.Field == string(failure.RendezvousRunID) &&
		strings.Contains(err.Error(), `"old"`) && strings.Contains(err.Error(), `"new"`)
}
