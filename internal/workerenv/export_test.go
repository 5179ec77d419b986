package workerenv

import "tpurun/internal/topology"

// For is the environment of worker w alone (Builder.Env, with rt's error file).
func For(base []string, plan *topology.Plan, w topology.Worker, rt Runtime) []string {
	return NewBuilder(base, plan, rt).Env(w, rt.ErrorFile)
}
