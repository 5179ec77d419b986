package workerenv

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"tpurun/internal/topology"
	"tpurun/worker"
)

// DefaultRole is ROLE_NAME when none is given, as torchrun's.
const DefaultRole = "default"

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

// PerRank reports whether key is a variable whose inherited value belongs to one process only: it is never passed
// through from the launcher's environment, whether or not the plan sets it. That is torchrun's and tpurun's
// per-rank variables, the device kinds', and an outer launcher's per-task ones (OuterTask).
func PerRank(key string) bool { return slices.Contains(perRank, key) || OuterTask(key) }

// perRank are the per-rank variables (see PerRank): torchrun's and tpurun's, then the device kinds' (asked of
// topology, where each kind names its own).
var perRank = append([]string{
	"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_ERROR_FILE",
	worker.EnvResultFD, worker.EnvReplicas, worker.EnvSweepTag, worker.EnvResultID, worker.EnvPreloaded,
}, topology.PerRankEnv()...)

// Builder builds the environments of the workers of one plan for one Runtime (but its ErrorFile, which is each
// worker's own): the inherited environment and the variables every worker of a node gets are merged once per
// node, sorted; each worker's environment is that merged with its own few variables, sharing every string it
// does not change.
type Builder struct {
	plan         *topology.Plan
	rt           Runtime
	inherited    map[string]string // base minus the per-rank variables, with torchrun's NCCL defaults
	ompInherited bool
	local        map[int]int     // workers per node
	nodes        map[int]nodeEnv // by node rank, built on first use
}

// nodeEnv is what every worker of one node shares: common are the variables the launcher sets alike for all of
// them (they win over a worker's plan env), merged the inherited environment with them, sorted.
type nodeEnv struct {
	common map[string]string
	merged []string
}

// NewBuilder is the builder of the environments of plan's workers under rt, from the inherited environment base.
func NewBuilder(base []string, plan *topology.Plan, rt Runtime) *Builder {
	env := make(map[string]string, len(base)+2)
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" && !PerRank(k) {
			env[k] = v
		}
	}
	b := &Builder{plan: plan, rt: rt, inherited: env, local: map[int]int{}, nodes: map[int]nodeEnv{}}
	_, b.ompInherited = env["OMP_NUM_THREADS"]
	torchNCCLAsync(env, plan.Device)
	for _, w := range plan.Workers {
		b.local[w.NodeRank]++
	}
	b.rt.Role = cmp.Or(b.rt.Role, DefaultRole)
	return b
}

// node is the shared part of the environment of node n's workers.
func (b *Builder) node(n int) nodeEnv {
	if ne, ok := b.nodes[n]; ok {
		return ne
	}
	world, rt := len(b.plan.Workers), b.rt
	c := map[string]string{
		"WORLD_SIZE": strconv.Itoa(world), "LOCAL_WORLD_SIZE": strconv.Itoa(b.local[n]), "GROUP_RANK": strconv.Itoa(n),
		"GROUP_WORLD_SIZE": strconv.Itoa(len(b.plan.Nodes)), topology.EnvJAXNumProcesses: strconv.Itoa(world),
		"ROLE_NAME": rt.Role, "MASTER_ADDR": rt.MasterAddr, "MASTER_PORT": strconv.Itoa(rt.MasterPort),
		"TORCHELASTIC_RUN_ID": rt.RunID,
		// torchrun's, for a launcher that hosts no store: rank 0 hosts MASTER_PORT's
		"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_RESTART_COUNT": strconv.Itoa(rt.RestartCount),
		"TORCHELASTIC_MAX_RESTARTS": strconv.Itoa(rt.MaxRestarts), worker.EnvRunID: rt.RunID,
		worker.EnvResultFD: strconv.Itoa(worker.ResultFD),
	}
	if rt.SweepTag != "" {
		c[worker.EnvSweepTag] = rt.SweepTag
	}
	merged := maps.Clone(b.inherited)
	maps.Copy(merged, c)
	ne := nodeEnv{common: c, merged: sorted(merged)}
	b.nodes[n] = ne
	return ne
}

// Env is the complete environment of worker w: the inherited environment minus every per-rank variable, then the
// plan's device env for w, then the torchrun and tpurun variables derived from w, the plan and the Runtime, with
// errorFile as its TORCHELASTIC_ERROR_FILE (none when empty). Later sources win; it is sorted, each key once.
func (b *Builder) Env(w topology.Worker, errorFile string) []string {
	ne := b.node(w.NodeRank)
	own := map[string]string{}
	for k, v := range w.Env { // the plan's env for w: over the inherited one, under the launcher's
		if _, set := ne.common[k]; !set {
			own[k] = v
		}
	}
	rank := strconv.Itoa(w.Rank)
	own["RANK"] = rank
	own["LOCAL_RANK"] = strconv.Itoa(w.LocalRank)
	if _, ok := w.Env["ROLE_RANK"]; !ok { // a multi-node plan counts each role's workers (spreadWorld)
		own["ROLE_RANK"] = rank
		own["ROLE_WORLD_SIZE"] = strconv.Itoa(len(b.plan.Workers))
	}
	own[topology.EnvJAXProcessID] = rank // for jax.distributed.initialize(process_id=..., num_processes=...)
	if errorFile != "" {
		own["TORCHELASTIC_ERROR_FILE"] = errorFile
	}
	if _, inPlan := w.Env["OMP_NUM_THREADS"]; !b.ompInherited && !inPlan && b.local[w.NodeRank] > 1 {
		own["OMP_NUM_THREADS"] = "1"
	}
	own[worker.EnvReplicas] = worker.FormatReplicas(w.Replicas)
	return mergeEnv(ne.merged, sorted(own))
}

// sorted is env as KEY=value entries, sorted.
func sorted(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// mergeEnv merges two sorted environments with each key once into one, sorted, over winning where both have a
// key. Entries of one key are adjacent in the sorted order (nothing sorts between "K=a" and "K=b" but entries of
// key K), so the two heads of the merge meet whenever both have a key.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	i, j := 0, 0
	for i < len(base) && j < len(over) {
		switch {
		case envKey(base[i]) == envKey(over[j]):
			out = append(out, over[j])
			i++
			j++
		case base[i] < over[j]:
			out = append(out, base[i])
			i++
		default:
			out = append(out, over[j])
			j++
		}
	}
	out = append(out, base[i:]...)
	return append(out, over[j:]...)
}

func envKey(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k
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

// What Plan shows for the values a run decides at launch.
const (
	PlaceholderRunID = "(random at launch)"
	PlaceholderPort  = "(free port at launch)"
	PlaceholderFile  = "(per-rank file at launch)"
)

// Plan returns a copy of plan whose workers' env is everything the launcher gives them: the plan's env plus
// For's torchrun and tpurun variables (nothing inherited). Run-time values that a run decides at launch
// (run id, master port, error file) are placeholders unless given in rt.
func Plan(plan *topology.Plan, rt Runtime) *topology.Plan {
	rt.RunID = cmp.Or(rt.RunID, PlaceholderRunID)
	out := &topology.Plan{Device: plan.Device, Nodes: append([]topology.Node(nil), plan.Nodes...)}
	b := NewBuilder([]string{}, plan, rt)
	for _, w := range plan.Workers {
		env := map[string]string{}
		for _, kv := range b.Env(w, rt.ErrorFile) {
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
