package workerenv

import (
	"slices"
	"strings"

	"tpurun/internal/topology"
	"tpurun/worker"
)

// Shared is what every local worker's environment holds with the same value, without any per-rank variable: the
// environment of the preloaded interpreter (--preload), so that what a module reads from the environment while it
// is imported is read there, once. local are this node's workers of the first attempt's plan, with base the
// inherited environment; without them (a multi-host world is planned at its join) it is base with the run's
// variables and, for localWorkers > 1, OMP_NUM_THREADS=1 unless base sets it, as every worker gets it.
func Shared(base []string, plan *topology.Plan, local []topology.Worker, localWorkers int, rt Runtime) []string {
	if len(local) == 0 {
		out := []string{worker.EnvRunID + "=" + rt.RunID, worker.EnvSweepTag + "=" + rt.SweepTag}
		omp := "" // the last value base gives
		for _, kv := range base {
			if v, ok := strings.CutPrefix(kv, "OMP_NUM_THREADS="); ok {
				omp = v
			}
			if k, _, _ := strings.Cut(kv, "="); !PerRank(k) && k != worker.EnvRunID && k != worker.EnvSweepTag {
				out = append(out, kv)
			}
		}
		if localWorkers > 1 && omp == "" {
			out = slices.Insert(out, 2, "OMP_NUM_THREADS=1")
		}
		return out
	}
	count := map[string]int{}
	b := NewBuilder(base, plan, rt)
	for _, w := range local {
		for _, kv := range b.Env(w, rt.ErrorFile) {
			count[kv]++
		}
	}
	return slices.DeleteFunc(b.Env(local[0], rt.ErrorFile), func(kv string) bool { // sorted already
		k, _, _ := strings.Cut(kv, "=")
		return count[kv] < len(local) || PerRank(k)
	})
}
