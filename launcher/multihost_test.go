package launcher_test

import (
	"errors"
	"slices"
	"testing"

	"tpurun/launcher"
	"tpurun/launcher/topology"
)

// TestWorldPlanGlobalRanks: 3 nodes of a 2-worker CPU plan give ranks n*2+l, one replica per rank, and every
// rank's env is the plan's env (a copy, not shared).
func TestWorldPlanGlobalRanks(t *testing.T) {
	local, err := topology.CPUPlan(2)
	if err != nil {
		t.Fatal(err)
	}
	w, err := launcher.WorldPlan(local, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Nodes) != 3 || len(w.Workers) != 6 {
		t.Fatalf("%d nodes %d workers, want 3 and 6", len(w.Nodes), len(w.Workers))
	}
	for i, wk := range w.Workers {
		if wk.Rank != i || wk.NodeRank != i/2 || wk.LocalRank != i%2 || !slices.Equal(wk.Replicas, []int{i}) {
			t.Fatalf("worker %d: %+v", i, wk)
		}
		if wk.Env["PJRT_LOCAL_PROCESS_RANK"] != local.Workers[i%2].Env["PJRT_LOCAL_PROCESS_RANK"] {
			t.Fatalf("worker %d env %v", i, wk.Env)
		}
	}
	w.Workers[0].Env["X"] = "1"
	if _, shared := w.Workers[2].Env["X"]; shared {
		t.Fatal("node 1's env map is node 0's")
	}
	(launcher.Megascale{Coordinator: "h0", NumSlices: 3, Slices: []int{0, 1, 2}, Port: 8081}).Apply(w)
	if e := w.Workers[5].Env; e["MEGASCALE_SLICE_ID"] != "2" || e["MEGASCALE_NUM_SLICES"] != "3" || e["MEGASCALE_COORDINATOR_ADDRESS"] != "h0" || e["MEGASCALE_PORT"] != "8081" {
		t.Fatalf("rank 5 megascale env: %v", e)
	}
	var ce *launcher.ConfigError
	if _, err := launcher.WorldPlan(w, []string{"a"}); !errors.As(err, &ce) {
		t.Fatalf("a world plan as the local plan: %v, want a *ConfigError", err)
	}
}
