package workerenv

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"tpurun/internal/topology"
	"tpurun/worker"
)

// referenceWorkerEnv is For as it was written (launcher.WorkerEnv) before the environment of a plan's workers was
// built once per plan: one map per worker, filled source after source, later sources winning. Builder must give the
// same.
func referenceFor(base []string, plan *topology.Plan, w topology.Worker, rt Runtime) []string {
	env := map[string]string{}
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
	if _, ok := w.Env["ROLE_RANK"]; !ok {
		set("ROLE_RANK", w.Rank)
		set("ROLE_WORLD_SIZE", world)
	}
	set(topology.EnvJAXProcessID, w.Rank)
	set(topology.EnvJAXNumProcesses, world)
	env["ROLE_NAME"] = role
	env["MASTER_ADDR"] = rt.MasterAddr
	set("MASTER_PORT", rt.MasterPort)
	env["TORCHELASTIC_RUN_ID"] = rt.RunID
	env["TORCHELASTIC_USE_AGENT_STORE"] = "False"
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
	set(worker.EnvResultFD, worker.ResultFD)
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

// TestEnvBuilderIsWorkerEnv: the environment built once per plan is, for every worker, what the map-per-worker
// composition gave: inherited values under the plan's under the launcher's, per-rank values never inherited, keys
// that sort around each other ("A" and "A0", "A=" and "A_"), a plan env that sets a launcher variable, and
// multi-node plans with their role ranks.
func TestEnvBuilderIsWorkerEnv(t *testing.T) {
	bases := [][]string{
		nil,
		{"PATH=/bin", "RANK=9", "TPU_VISIBLE_CHIPS=0,1", "OMP_NUM_THREADS=8", "=junk", "NOEQUALS", "PATH=/usr/bin",
			"WORLD_SIZE=99", "MASTER_ADDR=elsewhere", "A=1", "A0=2", "A_=3", "AB=4", "NCCL_ASYNC_ERROR_HANDLING=0",
			"X=", "TORCHELASTIC_ERROR_FILE=/inherited", "LOCAL_WORLD_SIZE=7", "ZZ=a=b"},
		{"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "HOME=/root", "OMP=1"},
	}
	var plans []*topology.Plan
	for _, n := range []int{1, 2, 5} {
		p, err := topology.CPUPlan(n)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	multi := &topology.Plan{Device: topology.GPU, Nodes: []topology.Node{{Rank: 0, LocalWorkers: 2}, {Rank: 1, LocalWorkers: 1}}}
	for r, node := range []int{0, 0, 1} {
		env := map[string]string{"TPU_VISIBLE_CHIPS": strconv.Itoa(r), "A": "plan", "WORLD_SIZE": "plan", "CUDA": "x"}
		if node == 1 {
			env["ROLE_RANK"], env["ROLE_WORLD_SIZE"], env["OMP_NUM_THREADS"] = "0", "1", "4"
		}
		multi.Workers = append(multi.Workers, topology.Worker{Rank: r, LocalRank: r % 2, NodeRank: node, Replicas: []int{r, r + 3}, Env: env})
	}
	plans = append(plans, multi)
	rts := []Runtime{
		{},
		{RunID: "r", Role: "trainer", RestartCount: 2, MaxRestarts: 3, MasterAddr: "h", MasterPort: 1234,
			ErrorFile: "/tmp/e.json", SweepTag: "tag"},
	}
	for bi, base := range bases {
		for pi, plan := range plans {
			for ri, rt := range rts {
				b := NewBuilder(base, plan, rt)
				for _, w := range plan.Workers {
					want := referenceFor(base, plan, w, rt)
					if got := b.Env(w, rt.ErrorFile); !slices.Equal(got, want) {
						t.Errorf("base %d plan %d runtime %d rank %d:\n got %q\nwant %q", bi, pi, ri, w.Rank, got, want)
					}
					if got := For(base, plan, w, rt); !slices.Equal(got, want) {
						t.Errorf("For: base %d plan %d runtime %d rank %d:\n got %q\nwant %q", bi, pi, ri, w.Rank, got, want)
					}
				}
			}
		}
	}
}

// TestEnvBuilderSharesTheCommonStrings: the workers of one node share every string of their environment that
// they do not set themselves: nothing of the inherited environment is copied per worker.
func TestEnvBuilderSharesTheCommonStrings(t *testing.T) {
	plan, err := topology.CPUPlan(4)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"PATH=/bin", "HOME=/root", "LANG=C.UTF-8"}
	b := NewBuilder(base, plan, Runtime{RunID: "r"})
	a, c := b.Env(plan.Workers[0], ""), b.Env(plan.Workers[1], "")
	for i, kv := range a {
		if !strings.HasPrefix(kv, "PATH=") {
			continue
		}
		if j := slices.Index(c, kv); j < 0 || unsafeData(a[i]) != unsafeData(c[j]) {
			t.Fatalf("%s is copied for each worker", kv)
		}
	}
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
