// Package workerenv owns the environment a worker is started with: the inherited environment minus every per-rank
// variable (PerRank, an outer launcher's task identity included), the plan's device variables for the worker, then
// torchrun's and tpurun's variables (RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_*, TPURUN_*), built once per plan
// and node for many workers (Builder). Shared is what every local worker shares, the preloaded interpreter's
// environment; Plan shows a plan's complete environments (tpurun plan); ExpandArgs does torchrun's ${local_rank}
// in arguments.
//
// It plans nothing (the plan and its device variables are package topology's) and starts nothing.
package workerenv
