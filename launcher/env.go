package launcher

import (
	"sort"
	"strconv"
	"strings"

	"tpurun/launcher/topology"
	"tpurun/worker"
)

// ResultFD is the file descriptor number of a worker's result channel (its first ExtraFiles entry).
const ResultFD = worker.ResultFD

// Runtime holds the values of a launch that are not in the plan: decided when the run starts.
type Runtime struct {
	RunID        string
	Role         string
	RestartCount int
	MaxRestarts  int
	MasterAddr   string
	MasterPort   int
	ErrorFile    string // TORCHELASTIC_ERROR_FILE for this worker; empty leaves it unset
	SweepTag     string // TPURUN_SWEEP_TAG: marks this launcher's processes for its orphan sweep
}

// perRank are variables whose inherited value belongs to one process only: they are never passed through from
// the launcher's environment, whether or not the plan sets them.
var perRank = []string{
	"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_ERROR_FILE",
	"TPU_VISIBLE_CHIPS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID", "PJRT_LOCAL_PROCESS_RANK",
	worker.EnvResultFD, worker.EnvReplicas, worker.EnvSweepTag, worker.EnvResultID, topology.EnvJAXLocalDeviceIDs,
	topology.EnvJAXProcessID, topology.EnvJAXNumProcesses, worker.EnvPreloaded,
}

// WorkerEnv is the complete environment of worker w: the inherited environment base (KEY=value entries) minus
// every per-rank variable, then the plan's device env for w, then the torchrun and tpurun variables derived from
// w, the plan and rt. Later sources win; the result is sorted and has each key once.
func WorkerEnv(base []string, plan *topology.Plan, w topology.Worker, rt Runtime) []string {
	env := make(map[string]string, len(base)+32)
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		env[k] = v
	}
	for _, k := range perRank {
		delete(env, k)
	}
	_, ompInherited := env["OMP_NUM_THREADS"]
	torchNCCLAsync(env, plan.Device)
	for k, v := range w.Env {
		env[k] = v
	}
	local := len(plan.Local(w.NodeRank))
	world := len(plan.Workers)
	role := rt.Role
	if role == "" {
		role = "default"
	}
	set := func(k string, v int) { env[k] = strconv.Itoa(v) }
	set("RANK", w.Rank)
	set("LOCAL_RANK", w.LocalRank)
	set("WORLD_SIZE", world)
	set("LOCAL_WORLD_SIZE", local)
	set("GROUP_RANK", w.NodeRank)
	set("GROUP_WORLD_SIZE", len(plan.Nodes))
	if _, ok := w.Env["ROLE_RANK"]; !ok { // a multi-node plan counts each role's workers (spreadWorld)
		set("ROLE_RANK", w.Rank)
		set("ROLE_WORLD_SIZE", world)
	}
	set(topology.EnvJAXProcessID, w.Rank) // for jax.distributed.initialize(process_id=..., num_processes=...)
	set(topology.EnvJAXNumProcesses, world)
	env["ROLE_NAME"] = role
	env["MASTER_ADDR"] = rt.MasterAddr
	set("MASTER_PORT", rt.MasterPort)
	env["TORCHELASTIC_RUN_ID"] = rt.RunID
	env["TORCHELASTIC_USE_AGENT_STORE"] = "False" // torchrun's, for a launcher that hosts no store: rank 0 hosts MASTER_PORT's
	set("TORCHELASTIC_RESTART_COUNT", rt.RestartCount)
	set("TORCHELASTIC_MAX_RESTARTS", rt.MaxRestarts)
	if rt.ErrorFile != "" {
		env["TORCHELASTIC_ERROR_FILE"] = rt.ErrorFile
	}
	if _, inPlan := w.Env["OMP_NUM_THREADS"]; !ompInherited && !inPlan && local > 1 {
		env["OMP_NUM_THREADS"] = "1"
	}
	env[worker.EnvRunID] = rt.RunID
	if rt.SweepTag != "" {
		env[worker.EnvSweepTag] = rt.SweepTag
	}
	set(worker.EnvResultFD, ResultFD)
	reps := make([]string, len(w.Replicas))
	for i, r := range w.Replicas {
		reps[i] = strconv.Itoa(r)
	}
	env[worker.EnvReplicas] = strings.Join(reps, ",")

	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// torchNCCLAsync sets NCCL's asynchronous error handling as torchrun does where the launcher's environment leaves
// it unset: TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (torchrun 2.2 and later), and on GPU also the name torch before 2.2
// reads, NCCL_ASYNC_ERROR_HANDLING=1, so that a failed peer makes NCCL abort instead of hang. torch 2.2 and later
// print a deprecation warning for the old name; an inherited TORCH_NCCL_ASYNC_ERROR_HANDLING (export it to
// silence that warning) or NCCL_ASYNC_ERROR_HANDLING leaves the old name alone.
func torchNCCLAsync(env map[string]string, dev topology.Device) {
	_, torchSet := env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]
	_, oldSet := env["NCCL_ASYNC_ERROR_HANDLING"]
	if !torchSet {
		env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
	}
	if dev.Kind().NCCL() && !torchSet && !oldSet {
		env["NCCL_ASYNC_ERROR_HANDLING"] = "1"
	}
}

// ExpandArgs replaces ${local_rank} in every argument with the worker's local rank, as torchrun does.
func ExpandArgs(args []string, localRank int) []string {
	out := make([]string, len(args))
	lr := strconv.Itoa(localRank)
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "${local_rank}", lr)
	}
	return out
}

// What PlanEnv shows for the values a run decides at launch.
const (
	PlaceholderRunID = "(random at launch)"
	PlaceholderPort  = "(free port at launch)"
	PlaceholderFile  = "(per-rank file at launch)"
)

// PlanEnv returns a copy of plan whose workers' env is everything the launcher gives them: the plan's env plus
// WorkerEnv's torchrun and tpurun variables (nothing inherited). Run-time values that a run decides at launch
// (run id, master port, error file) are placeholders unless given in rt.
func PlanEnv(plan *topology.Plan, rt Runtime) *topology.Plan {
	if rt.RunID == "" {
		rt.RunID = PlaceholderRunID
	}
	out := &topology.Plan{Device: plan.Device, Nodes: append([]topology.Node(nil), plan.Nodes...)}
	for _, w := range plan.Workers {
		env := map[string]string{}
		for _, kv := range WorkerEnv([]string{}, plan, w, rt) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if rt.MasterPort == 0 {
			env["MASTER_PORT"] = PlaceholderPort
		}
		env["TORCHELASTIC_ERROR_FILE"] = PlaceholderFile // the launcher makes one per rank and attempt
		w.Replicas = append([]int(nil), w.Replicas...)
		w.Env = env
		out.Workers = append(out.Workers, w)
	}
	return out
}
