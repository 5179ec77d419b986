package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/workerenv"
)

// TestPlanJSONExactEnv: `tpurun plan --format json` on fake v5litepod-8 and v4-8 hosts shows one worker per chip
// with the exact TPU env of TPU_FACTS.md plus the launcher's torchrun variables.
func TestPlanJSONExactEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, id       string
		chips          int
		accel, bounds  string
		hostBounds     string
		chipsPerHostBd string
	}{
		{"v5litepod-8", idV5e, 8, "v5litepod-8", "2,4,1", "1,1,1", "2,4,1"},
		{"v4-8", idV4, 4, "v4-8", "2,2,1", "1,1,1", "2,2,1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, tc.id, tc.chips)
			base := portBase(t)
			p := h.plan(t, nil, "--tpu-port-base", strconv.Itoa(base), "--metadata-timeout", "1s")
			if p.Device != "tpu" || len(p.Workers) != tc.chips || len(p.Nodes) != 1 {
				t.Fatalf("plan: device %q, %d workers, %d nodes; want tpu, %d, 1", p.Device, len(p.Workers), len(p.Nodes), tc.chips)
			}
			var addrs []string
			for i := 0; i < tc.chips; i++ {
				addrs = append(addrs, fmt.Sprintf("localhost:%d", base+i))
			}
			for i, w := range p.Workers {
				want := map[string]string{
					"PJRT_DEVICE": "TPU", "PJRT_LOCAL_PROCESS_RANK": strconv.Itoa(i), "PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(tc.chips),
					"TPU_VISIBLE_CHIPS": strconv.Itoa(i), "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1", "TPU_PROCESS_BOUNDS": tc.bounds,
					"TPU_PROCESS_PORT": strconv.Itoa(base + i), "TPU_PROCESS_ADDRESSES": strings.Join(addrs, ","),
					"CLOUD_TPU_TASK_ID": strconv.Itoa(i), "TPU_ACCELERATOR_TYPE": tc.accel, "TPU_HOST_BOUNDS": tc.hostBounds,
					"TPU_CHIPS_PER_HOST_BOUNDS": tc.chipsPerHostBd, "TPU_WORKER_ID": "0",
					"TPU_SKIP_MDS_QUERY": "true", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
					"RANK": strconv.Itoa(i), "LOCAL_RANK": strconv.Itoa(i), "WORLD_SIZE": strconv.Itoa(tc.chips),
					"LOCAL_WORLD_SIZE": strconv.Itoa(tc.chips), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
					"ROLE_RANK": strconv.Itoa(i), "ROLE_WORLD_SIZE": strconv.Itoa(tc.chips), "ROLE_NAME": "default",
					"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": workerenv.PlaceholderPort, "TORCHELASTIC_RUN_ID": workerenv.PlaceholderRunID,
					"TPURUN_RUN_ID": workerenv.PlaceholderRunID, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
					"OMP_NUM_THREADS": "1", "TPURUN_RESULT_FD": "3", "TPURUN_REPLICAS": strconv.Itoa(i),
					"TORCHELASTIC_ERROR_FILE": workerenv.PlaceholderFile, "TORCHELASTIC_USE_AGENT_STORE": "False",
					"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
					"JAX_PROCESS_ID":                  strconv.Itoa(i), "JAX_NUM_PROCESSES": strconv.Itoa(tc.chips),
				}
				if w.Rank != i || w.LocalRank != i || w.NodeRank != 0 || len(w.Replicas) != 1 || w.Replicas[0] != i {
					t.Errorf("worker %d: rank %d local %d node %d replicas %v", i, w.Rank, w.LocalRank, w.NodeRank, w.Replicas)
				}
				if !equalEnv(w.Env, want) {
					t.Errorf("worker %d env differs:\n%s", i, envDiff(w.Env, want))
				}
			}
		})
	}
}

// TestRunChildSeesExactlyThePlanEnv: a run on a fake v5litepod-8 host whose parent limits tpurun to chips 4-7 (as
// Ray does) and leaks per-rank values: every child's env holds every key of `tpurun plan` with the same value, and
// nothing else but what the parent passed on; the parent's per-rank values never reach a child.
func TestRunChildSeesExactlyThePlanEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		workers int
		chips   []string // TPU_VISIBLE_CHIPS per rank
	}{
		{"one-per-chip", nil, 4, []string{"4", "5", "6", "7"}},
		{"spmd", []string{"--spmd"}, 1, []string{"4,5,6,7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, idV5e, 8)
			parent := []string{"TPU_VISIBLE_CHIPS=4,5,6,7", "RANK=9", "LOCAL_RANK=9", "CLOUD_TPU_TASK_ID=77",
				"TPU_PROCESS_PORT=1", "TPU_PROCESS_ADDRESSES=elsewhere:1", "PJRT_LOCAL_PROCESS_RANK=5", "KEEP_ME=yes"}
			// A run id of its own: the launcher's orphan sweep kills whatever carries its run id.
			args := append([]string{"--tpu-port-base", strconv.Itoa(portBase(t)), "--run-id", "envtest-" + tc.name,
				"--master-port", "29999"}, tc.args...)
			p := h.plan(t, parent, args...)
			if len(p.Workers) != tc.workers {
				t.Fatalf("plan has %d workers, want %d", len(p.Workers), tc.workers)
			}
			r := h.cli(t, parent, append(args, "--", testutil.Program(t))...)
			if r.code != 0 {
				t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
			}
			got := h.dumped(t)
			if len(got) != tc.workers {
				t.Fatalf("%d workers dumped their env, want %d", len(got), tc.workers)
			}
			parentEnv := map[string]string{}
			for _, kv := range append(append([]string(nil), h.env...), parent...) {
				k, v, _ := strings.Cut(kv, "=")
				parentEnv[k] = v
			}
			for _, w := range p.Workers {
				env := got[strconv.Itoa(w.Rank)]
				if env == nil {
					t.Fatalf("rank %d dumped no env", w.Rank)
				}
				for k, v := range w.Env {
					if g, ok := env[k]; !ok || (g != v && v != workerenv.PlaceholderFile) {
						t.Errorf("rank %d: %s=%q (present %v), plan says %q", w.Rank, k, g, ok, v)
					}
				}
				for k, v := range env {
					switch k { // decided at launch, not in a plan: the launcher's tag, the pipe's identity, the module's copy
					case "TPURUN_SWEEP_TAG", "TPURUN_RESULT_ID", "PYTHONPATH":
						continue
					}
					if _, inPlan := w.Env[k]; !inPlan && parentEnv[k] != v {
						t.Errorf("rank %d: %s=%q is neither in the plan nor the parent's", w.Rank, k, v)
					}
				}
				if env["TPU_VISIBLE_CHIPS"] != tc.chips[w.LocalRank] || env["KEEP_ME"] != "yes" || env["TPU_SKIP_MDS_QUERY"] != "true" {
					t.Errorf("rank %d: TPU_VISIBLE_CHIPS=%q KEEP_ME=%q TPU_SKIP_MDS_QUERY=%q; want %q, yes, true", w.Rank,
						env["TPU_VISIBLE_CHIPS"], env["KEEP_ME"], env["TPU_SKIP_MDS_QUERY"], tc.chips[w.LocalRank])
				}
				if tc.name == "spmd" {
					for _, k := range []string{"TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID"} {
						if v, ok := env[k]; ok && v == parentEnv[k] {
							t.Errorf("rank %d: the parent's %s=%q was copied to an SPMD child", w.Rank, k, v)
						}
					}
					if env["XLA_USE_SPMD"] != "1" {
						t.Errorf("SPMD child: XLA_USE_SPMD=%q", env["XLA_USE_SPMD"])
					}
				}
			}
		})
	}
}

// TestRaySubsetAndNestedRun: tpurun runs where Ray's actor holding 1 or 2 chips of a host runs it (TPU_VISIBLE_CHIPS
// with TPU_CHIPS_PER_HOST_BOUNDS 1,1,1 or 1,2,1 and TPU_HOST_BOUNDS 1,1,1), by default and with --spmd, and inside
// a worker of its own --nprocs 1 run, whose env is the same: each time the worker sees the chips it was given.
func TestRaySubsetAndNestedRun(t *testing.T) {
	t.Parallel()
	ray1 := []string{"TPU_VISIBLE_CHIPS=3", "TPU_CHIPS_PER_HOST_BOUNDS=1,1,1", "TPU_HOST_BOUNDS=1,1,1"}
	ray2 := []string{"TPU_VISIBLE_CHIPS=2,3", "TPU_CHIPS_PER_HOST_BOUNDS=1,2,1", "TPU_HOST_BOUNDS=1,1,1"}
	for _, tc := range []struct {
		name   string
		env    []string
		nested bool // run tpurun --nprocs 1 -- tpurun ARGS -- worker
		args   []string
		chips  []string // TPU_VISIBLE_CHIPS per rank
	}{
		{"ray-1-chip", ray1, false, nil, []string{"3"}},
		{"ray-1-chip-spmd", ray1, false, []string{"--spmd"}, []string{"3"}},
		{"ray-2-chips", ray2, false, nil, []string{"2", "3"}},
		{"ray-2-chips-spmd", ray2, false, []string{"--spmd"}, []string{"2,3"}},
		{"nested-nprocs-1", nil, true, nil, []string{"0"}},
		{"nested-nprocs-1-spmd", nil, true, []string{"--spmd"}, []string{"0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, idV5e, 8)
			args := append([]string{"--tpu-port-base", strconv.Itoa(portBase(t))}, tc.args...)
			args = append(args, "--", testutil.Program(t))
			if tc.nested {
				inner := append([]string{filepath.Join(bin, "tpurun"), "--sysfs-root", h.sys, "--dev-root", h.dev}, args...)
				args = append([]string{"--nprocs", "1", "--tpu-port-base", strconv.Itoa(portBase(t)), "--"}, inner...)
			}
			r := h.cli(t, tc.env, args...)
			if r.code != 0 {
				t.Fatalf("tpurun %q: exit %d\n%s", args, r.code, r.stderr)
			}
			got := h.dumped(t)
			if len(got) != len(tc.chips) {
				t.Fatalf("%d workers dumped their env, want %d\n%s", len(got), len(tc.chips), r.stderr)
			}
			for rank, want := range tc.chips {
				if env := got[strconv.Itoa(rank)]; env["TPU_VISIBLE_CHIPS"] != want {
					t.Errorf("rank %d: TPU_VISIBLE_CHIPS=%q, want %q", rank, env["TPU_VISIBLE_CHIPS"], want)
				}
			}
		})
	}
}

// TestConfigErrorsExit2BeforeStarting: impossible splits and malformed env stop before any worker starts, with a
// message that names the value, its source and the valid choices.
func TestConfigErrorsExit2BeforeStarting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		id    string
		env   []string
		args  []string
		wants []string
	}{
		{"nprocs-3-of-8", idV5e, nil, []string{"--nprocs", "3"}, []string{"nprocs 3", "not a valid split of the 8 v5e chips", "use 1, 2, 4 or 8"}},
		{"nprocs-16-of-8", idV5e, nil, []string{"--nproc_per_node", "16"}, []string{"nprocs 16", "more than the 8 v5e chips", "use 1, 2, 4 or 8"}},
		{"num-devices-abc", idV5e, []string{"TPU_NUM_DEVICES=abc"}, nil, []string{"TPU_NUM_DEVICES", `"abc"`}},
		{"nprocs-vs-num-devices", idV5e, []string{"TPU_NUM_DEVICES=4"}, []string{"--nprocs", "2"}, []string{"contradicts TPU_NUM_DEVICES", "use 4"}},
		{"spmd-with-nprocs", idV5e, nil, []string{"--spmd", "--nprocs", "2"}, []string{"SPMD", "use 1"}},
		{"bounds-garbage", idV4, []string{"TPU_PROCESS_BOUNDS=2,x,1"}, nil, []string{"TPU_PROCESS_BOUNDS", "2,x,1"}},
		{"unknown-device-id", "0x0099", nil, nil, []string{"0x0099", "TPU_ACCELERATOR_TYPE"}},
		{"bad-device", idV5e, nil, []string{"--device", "fpga"}, []string{"--device", "fpga", "auto, cpu, gpu or tpu"}},
		{"pjrt-device-garbage", idV5e, []string{"PJRT_DEVICE=QPU"}, nil, []string{"PJRT_DEVICE", "QPU"}},
		{"nproc-per-node-vs-device", idV5e, nil, []string{"--nproc-per-node", "gpu", "--device", "tpu"}, []string{"--nproc-per-node", "--device tpu"}},
		{"nprocs-device-word", idV5e, nil, []string{"--nprocs", "auto"}, []string{"--nprocs", "--nproc-per-node"}},
		{"nprocs-zero", idV5e, nil, []string{"--nprocs", "0"}, []string{"--nprocs", "whole number from 1"}},
		{"accelerator-type-garbage", idV5e, nil, []string{"--accelerator-type", "v9-banana"}, []string{"--accelerator-type", "v9-banana"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, tc.id, 8)
			for _, mode := range [][]string{append(tc.args, "--", testutil.Program(t)), append([]string{"plan"}, tc.args...)} {
				r := h.cli(t, tc.env, mode...) // at once: h.cli fails at the deadline
				if r.code != 2 {
					t.Fatalf("tpurun %q: exit %d, want 2\n%s", mode, r.code, r.stderr)
				}
				for _, w := range tc.wants {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("tpurun %q: stderr lacks %q:\n%s", mode, w, r.stderr)
					}
				}
			}
			if n := len(h.dumped(t)); n != 0 {
				t.Fatalf("%d workers started despite the error", n)
			}
		})
	}
}

// TestHeldChipRefusesUnlessForce: a real process holding /dev/vfio/3 open stops the launch naming its pid; --force
// warns and starts every worker.
func TestHeldChipRefusesUnlessForce(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV5e, 8)
	pid := hold(t, filepath.Join(h.dev, "vfio", "3"))
	args := []string{"--tpu-port-base", strconv.Itoa(portBase(t)), "--", testutil.Program(t)}
	r := h.cli(t, nil, args...)
	if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", pid)) || !strings.Contains(r.stderr, "vfio/3") ||
		!strings.Contains(r.stderr, "--force") {
		t.Fatalf("held chip: exit %d, want 2 naming pid %d, vfio/3 and --force:\n%s", r.code, pid, r.stderr)
	}
	if n := len(h.dumped(t)); n != 0 {
		t.Fatalf("%d workers started on a held chip", n)
	}
	// Relative roots too: /proc/*/fd links are absolute, so tpurun must resolve --dev-root before matching.
	rel := *h
	rel.wd, rel.sys, rel.dev = filepath.Dir(h.dev), "sys", "dev"
	if r := rel.cli(t, nil, args...); r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("held chip with relative --dev-root: exit %d, want 2 naming pid %d:\n%s", r.code, pid, r.stderr)
	}
	r = h.cli(t, nil, append([]string{"--force"}, args...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "(forced)") || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("--force: exit %d, want 0 with a warning naming pid %d:\n%s", r.code, pid, r.stderr)
	}
	if n := len(h.dumped(t)); n != 8 {
		t.Fatalf("--force started %d workers, want 8", n)
	}
	d := h.cli(t, nil, "doctor", "--metadata-timeout", "300ms")
	if d.code != 0 || !strings.Contains(d.stdout, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("doctor: exit %d, want the holder pid %d in:\n%s%s", d.code, pid, d.stdout, d.stderr)
	}
}

// TestMetadataRefused: a TPU host that neither env nor sysfs describes needs the metadata server; when it refuses,
// tpurun exits 2 within the budget naming the URL and the env vars that replace it. A v4 host whose chips sysfs
// proves falls back to them and runs.
func TestMetadataRefused(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV4, 0)
	// Within the budget: h.cli fails at the deadline, long before a tpurun that ignores it would give up.
	r := h.cli(t, nil, "--device", "tpu", "--metadata-timeout", "1s", "--", testutil.Program(t))
	if r.code != 2 || !strings.Contains(r.stderr, "computeMetadata/v1/instance/attributes/") ||
		!strings.Contains(r.stderr, "TPU_ACCELERATOR_TYPE") {
		t.Fatalf("refused metadata: exit %d, want 2 naming the URL and the remedy:\n%s", r.code, r.stderr)
	}
	v4 := newHost(t, idV4, 4)
	r = v4.cli(t, nil, "--metadata-timeout", "1s", "--tpu-port-base", strconv.Itoa(portBase(t)), "--", testutil.Program(t))
	if r.code != 0 || len(v4.dumped(t)) != 4 {
		t.Fatalf("v4 host with refused metadata: exit %d, %d workers; want 0 and 4 from sysfs:\n%s", r.code, len(v4.dumped(t)), r.stderr)
	}
}

// TestDoctorShowsSources: doctor prints every detected value with its source, the chips with their device nodes,
// the lockfile and the metadata reachability; --format json carries the same facts.
func TestDoctorShowsSources(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV5e, 8)
	lock := filepath.Join(t.TempDir(), "libtpu_lockfile")
	r := h.cli(t, []string{"TPU_NUM_DEVICES=4"}, "doctor", "--metadata-timeout", "300ms", "--lockfile", lock)
	if r.code != 0 {
		t.Fatalf("doctor: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"SETTING", "device", "tpu", "sysfs " + h.sys, "env TPU_NUM_DEVICES", "0,1,2,3",
		filepath.Join(h.dev, "vfio", "7"), "lockfile " + lock + ": absent", "metadata http://", "UNREACHABLE after"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = h.cli(t, nil, "doctor", "--format", "json", "--metadata-timeout", "300ms", "--lockfile", lock)
	var d struct {
		Host struct {
			Device struct {
				Value  string `json:"value"`
				Source struct{ Kind, Name string }
			} `json:"device"`
			Chips []struct {
				Index   int    `json:"index"`
				DevNode string `json:"dev_node"`
			} `json:"chips"`
		} `json:"host"`
		Lockfile struct{ Path string } `json:"lockfile"`
		Metadata *struct {
			URL string `json:"url"`
			OK  bool   `json:"ok"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil {
		t.Fatalf("doctor --format json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if d.Host.Device.Value != "tpu" || d.Host.Device.Source.Kind != "sysfs" || len(d.Host.Chips) != 8 ||
		d.Host.Chips[5].DevNode != filepath.Join(h.dev, "vfio", "5") || d.Lockfile.Path != lock || d.Metadata == nil || d.Metadata.OK {
		t.Fatalf("doctor json: %+v", d)
	}
}

// TestNprocPerNodeWords: torchrun's --nproc-per-node cpu means one process per CPU core; auto on a host without
// accelerators too; unset on CPU means one.
func TestNprocPerNodeWords(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV5e, 0)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--nproc_per_node", "cpu"}, runtime.NumCPU()},
		{[]string{"--nproc-per-node", "auto"}, runtime.NumCPU()},
		{nil, 1},
		{[]string{"--device", "cpu", "--nprocs", "3"}, 3},
	} {
		p := h.plan(t, nil, tc.args...)
		if p.Device != "cpu" || len(p.Workers) != tc.want {
			t.Errorf("plan %q: device %s, %d workers; want cpu, %d", tc.args, p.Device, len(p.Workers), tc.want)
		}
	}
	v5e := newHost(t, idV5e, 8)
	if p := v5e.plan(t, nil, "--nproc-per-node", "tpu", "--tpu-port-base", strconv.Itoa(portBase(t))); p.Device != "tpu" || len(p.Workers) != 8 {
		t.Errorf("--nproc-per-node tpu on v5litepod-8: device %s, %d workers", p.Device, len(p.Workers))
	}
	if p := v5e.plan(t, nil, "--device", "cpu", "--nprocs", "2"); p.Device != "cpu" || len(p.Workers) != 2 || p.Workers[1].Env["PJRT_DEVICE"] != "CPU" {
		t.Errorf("--device cpu on a TPU host: device %s, %d workers", p.Device, len(p.Workers))
	}
}

func equalEnv(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func envDiff(got, want map[string]string) string {
	var b strings.Builder
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			fmt.Fprintf(&b, "  %s: got %q (present %v), want %q\n", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "  %s=%q not expected\n", k, v)
		}
	}
	return b.String()
}

// TestPlanMultiHostFromEnv: a v4-16 slice described by env (host 1 of ip0,ip1) plans the whole slice; host 1's
// local rank 0 reproduces TPU_FACTS.md's worked example, and `tpurun plan` says this host is node 1.
func TestPlanMultiHostFromEnv(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV4, 4)
	env := []string{"TPU_ACCELERATOR_TYPE=v4-16", "TPU_WORKER_ID=1", "TPU_WORKER_HOSTNAMES=ip0,ip1"}
	b := portBase(t)
	p := h.plan(t, env, "--tpu-port-base", strconv.Itoa(b))
	if len(p.Workers) != 8 || len(p.Nodes) != 2 {
		t.Fatalf("v4-16: %d workers on %d nodes, want 8 on 2", len(p.Workers), len(p.Nodes))
	}
	w := p.Workers[4]
	var addrs []string
	for _, ip := range []string{"ip0", "ip1"} {
		for lr := 0; lr < 4; lr++ {
			addrs = append(addrs, fmt.Sprintf("%s:%d", ip, b+lr))
		}
	}
	for k, v := range map[string]string{"TPU_PROCESS_BOUNDS": "2,2,2", "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
		"CLOUD_TPU_TASK_ID": "4", "TPU_VISIBLE_CHIPS": "0", "TPU_PROCESS_PORT": strconv.Itoa(b),
		"TPU_PROCESS_ADDRESSES": strings.Join(addrs, ","), "TPU_WORKER_ID": "1", "TPU_HOST_BOUNDS": "1,1,2",
		"RANK": "4", "LOCAL_RANK": "0", "GROUP_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"} {
		if w.Env[k] != v {
			t.Errorf("rank 4: %s=%q, want %q", k, w.Env[k], v)
		}
	}
	r := h.cli(t, env, "plan", "--tpu-port-base", strconv.Itoa(b))
	if r.code != 0 || !strings.Contains(r.stdout, "this host: node 1") {
		t.Fatalf("plan table: exit %d, want 'this host: node 1':\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestMetadataAskedOncePerRun: on a v4 host whose 4 chips do not prove a single host, a run asks the metadata
// server (GCE_METADATA_HOST) for tpu-env exactly once and no key twice, then starts every worker with the answer.
func TestMetadataAskedOncePerRun(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	counts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/instance/attributes/")
		mu.Lock()
		counts[key]++
		mu.Unlock()
		if key != "tpu-env" || r.Header.Get("Metadata-Flavor") != "Google" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		fmt.Fprint(w, "ACCELERATOR_TYPE: 'v4-8'\nCHIPS_PER_HOST_BOUNDS: '2,2,1'\nHOST_BOUNDS: '1,1,1'\nWORKER_ID: '0'\n")
	}))
	defer srv.Close()
	h := newHost(t, idV4, 4)
	r := h.cli(t, []string{"GCE_METADATA_HOST=" + srv.Listener.Addr().String()},
		"--tpu-port-base", strconv.Itoa(portBase(t)), "--", testutil.Program(t))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	got := h.dumped(t)
	if len(got) != 4 || got["3"]["TPU_ACCELERATOR_TYPE"] != "v4-8" || got["3"]["TPU_SKIP_MDS_QUERY"] != "true" {
		t.Fatalf("%d workers; rank 3 TPU_ACCELERATOR_TYPE=%q TPU_SKIP_MDS_QUERY=%q; want 4, v4-8, true", len(got),
			got["3"]["TPU_ACCELERATOR_TYPE"], got["3"]["TPU_SKIP_MDS_QUERY"])
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["tpu-env"] != 1 {
		t.Errorf("tpu-env asked %d times, want exactly 1 (detection runs once per run)", counts["tpu-env"])
	}
	for k, n := range counts {
		if n > 1 {
			t.Errorf("metadata key %s asked %d times", k, n)
		}
	}
}

// TestPlanMultisliceEverySlice: `tpurun plan` on host 1 of slice 0 of a multislice job (2 slices of a v4-16, 2
// hosts of 4 chips each) lists the whole job's 16 workers, and every one with what it will get: the per-slice
// TPU_WORKER_ID, CLOUD_TPU_TASK_ID, TPU_PROCESS_ADDRESSES and MEGASCALE_SLICE_ID of its own slice (the other
// slice's hosts by placeholder, without a comma: only they list their names), the job-wide RANK and WORLD_SIZE.
func TestPlanMultisliceEverySlice(t *testing.T) {
	t.Parallel()
	h := newHost(t, idV4, 4)
	env := []string{"TPU_ACCELERATOR_TYPE=v4-16", "TPU_WORKER_ID=1", "TPU_WORKER_HOSTNAMES=ip0,ip1", "MEGASCALE_NUM_SLICES=2",
		"MEGASCALE_SLICE_ID=0", "MEGASCALE_COORDINATOR_ADDRESS=ip0"}
	b := portBase(t)
	p := h.plan(t, env, "--tpu-port-base", strconv.Itoa(b))
	if len(p.Workers) != 16 || len(p.Nodes) != 4 {
		t.Fatalf("2 slices of a v4-16: %d workers on %d nodes, want 16 on 4", len(p.Workers), len(p.Nodes))
	}
	for _, w := range p.Workers {
		slice, worker := w.NodeRank/2, w.NodeRank%2
		want := map[string]string{"RANK": strconv.Itoa(w.Rank), "WORLD_SIZE": "16", "GROUP_RANK": strconv.Itoa(w.NodeRank),
			"TPU_WORKER_ID": strconv.Itoa(worker), "CLOUD_TPU_TASK_ID": strconv.Itoa(worker*4 + w.LocalRank),
			"MEGASCALE_SLICE_ID": strconv.Itoa(slice), "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_COORDINATOR_ADDRESS": "ip0",
			"TPU_VISIBLE_CHIPS": strconv.Itoa(w.LocalRank), "TPU_PROCESS_BOUNDS": "2,2,2"}
		for k, v := range want {
			if w.Env[k] != v {
				t.Errorf("rank %d (slice %d, worker %d): %s=%q, want %q", w.Rank, slice, worker, k, w.Env[k], v)
			}
		}
		addrs := w.Env["TPU_PROCESS_ADDRESSES"]
		first := "ip0:"
		if slice == 1 {
			first = "<slice-1-worker-0>:"
		}
		if n := len(strings.Split(addrs, ",")); n != 8 || !strings.HasPrefix(addrs, first) {
			t.Errorf("rank %d (slice %d): TPU_PROCESS_ADDRESSES=%q, want its slice's 8 processes", w.Rank, slice, addrs)
		}
	}
}
