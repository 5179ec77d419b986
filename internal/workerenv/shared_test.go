package workerenv_test

import (
	"slices"
	"strings"
	"testing"

	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
)

// TestShared: the preloaded interpreter gets what every local worker's environment holds alike and no per-rank
// variable; without the local workers (a world planned at its join) the inherited environment with the run's
// variables, OMP_NUM_THREADS=1 for several workers unless it is given a value.
func TestShared(t *testing.T) {
	plan, err := topology.CPUPlan(4)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"RANK=9", "PATH=/bin", "SLURM_PROCID=3"}
	rt := workerenv.Runtime{RunID: "r", MasterAddr: "h", MasterPort: 1234, SweepTag: "t"}
	got := workerenv.Shared(base, plan, plan.Local(0), 4, rt)
	for _, kv := range []string{"PATH=/bin", "PJRT_DEVICE=CPU", "MASTER_PORT=1234", "OMP_NUM_THREADS=1"} {
		if !slices.Contains(got, kv) {
			t.Errorf("shared env lacks %s: %v", kv, got)
		}
	}
	for _, kv := range got {
		if k, _, _ := strings.Cut(kv, "="); workerenv.PerRank(k) {
			t.Errorf("shared env holds the per-rank %s", kv)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("shared env not sorted: %v", got)
	}

	got = workerenv.Shared(append(base, "OMP_NUM_THREADS="), nil, nil, 2, rt)
	for _, kv := range []string{"TPURUN_RUN_ID=r", "TPURUN_SWEEP_TAG=t", "PATH=/bin", "OMP_NUM_THREADS=1"} {
		if !slices.Contains(got, kv) {
			t.Errorf("shared env before the join lacks %s: %v", kv, got)
		}
	}
	if slices.Contains(got, "RANK=9") || slices.Contains(got, "SLURM_PROCID=3") {
		t.Errorf("shared env before the join holds a per-rank variable: %v", got)
	}
	if got := workerenv.Shared([]string{"OMP_NUM_THREADS=8"}, nil, nil, 2, rt); slices.Contains(got, "OMP_NUM_THREADS=1") {
		t.Errorf("OMP_NUM_THREADS=1 added over the inherited 8: %v", got)
	}
}
