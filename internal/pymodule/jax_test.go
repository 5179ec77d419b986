package pymodule

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeJaxDistributed stands in for jax.distributed (JAX cannot be installed here): initialize has JAX 0.11's
// parameters and records the ones it was given, exactly, in $FAKE_JAX_CALLS.
const fakeJaxDistributed = `
import json, os
_UNSET = object()
def initialize(coordinator_address=_UNSET, num_processes=_UNSET, process_id=_UNSET, local_device_ids=_UNSET,
               cluster_detection_method=_UNSET, initialization_timeout=_UNSET, coordinator_bind_address=_UNSET,
               heartbeat_timeout_seconds=_UNSET, shutdown_timeout_seconds=_UNSET, partition_index=_UNSET):
    given = {k: v for k, v in locals().items() if v is not _UNSET}
    with open(os.environ["FAKE_JAX_CALLS"], "a") as f:
        f.write(json.dumps(given) + "\n")
    return "initialized"
`

// fakeOldJaxDistributed is a JAX from before cluster_detection_method.
const fakeOldJaxDistributed = `
import json, os
def initialize(coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None):
    with open(os.environ["FAKE_JAX_CALLS"], "a") as f:
        f.write(json.dumps(dict(coordinator_address=coordinator_address, num_processes=num_processes,
                                process_id=process_id, local_device_ids=local_device_ids)) + "\n")
`

func fakeJax(t *testing.T, distributed string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "jax"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"__init__.py": "from . import distributed\n", "distributed.py": distributed} {
		if err := os.WriteFile(filepath.Join(dir, "jax", name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// jaxCall runs `tpurun.jax_initialize(**overrides)` in a Python with exactly env (plus the module and the fake
// jax on PYTHONPATH) and returns the arguments jax.distributed.initialize got, or the error it raised.
func jaxCall(t *testing.T, jax string, env map[string]string, overrides string) (map[string]any, string) {
	t.Helper()
	py, dir := pythonModule(t)
	calls := filepath.Join(t.TempDir(), "calls")
	cmd := exec.Command(py, "-c", `
import sys, tpurun
try:
    r = tpurun.jax_initialize(`+overrides+`)
except Exception as e:
    print("%s: %s" % (type(e).__name__, e))
`)
	cmd.Env = []string{"PYTHONPATH=" + dir + string(os.PathListSeparator) + jax, "FAKE_JAX_CALLS=" + calls, "PYTHONDONTWRITEBYTECODE=1"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		return nil, strings.TrimSpace(string(out))
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("jax.distributed.initialize was called %d times: %s", len(lines), b)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	return got, strings.TrimSpace(string(out))
}

// TestJaxInitialize: the arguments jax.distributed.initialize gets from tpurun's environment, exactly.
func TestJaxInitialize(t *testing.T) {
	jax := fakeJax(t, fakeJaxDistributed)
	// A worker's torchrun variables as tpurun sets them: node 1 of 2, 2 workers per node, local rank 1.
	worker := func(extra ...string) map[string]string {
		env := map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "1", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29511"}
		for i := 0; i+1 < len(extra); i += 2 {
			env[extra[i]] = extra[i+1]
		}
		return env
	}
	base := map[string]any{"coordinator_address": "10.1.2.3:29511", "num_processes": float64(4), "process_id": float64(3),
		"cluster_detection_method": "deactivate"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		env       map[string]string
		overrides string
		want      map[string]any
	}{
		{"cpu", worker("PJRT_DEVICE", "CPU"), "", base},
		{"coordinator from JAX_COORDINATOR_ADDRESS", worker("JAX_COORDINATOR_ADDRESS", "host0:8482"), "",
			with("coordinator_address", "host0:8482")},
		{"ipv6 master", worker("MASTER_ADDR", "fd00::1"), "", with("coordinator_address", "[fd00::1]:29511")},
		// A TPU host with a process per chip: the id is the rank, not TPU_WORKER_ID (one per host).
		{"tpu process per chip", worker("PJRT_DEVICE", "TPU", "TPU_WORKER_ID", "1", "TPU_VISIBLE_CHIPS", "1"), "", base},
		// GPU workers that all see every GPU (torchrun's way) take GPU LOCAL_RANK.
		{"gpu shared", worker("PJRT_DEVICE", "CUDA"), "", with("local_device_ids", []any{float64(1)})},
		{"gpu shared, listed", worker("PJRT_DEVICE", "CUDA", "CUDA_VISIBLE_DEVICES", "4,5"), "", with("local_device_ids", []any{float64(1)})},
		{"gpu isolated", worker("PJRT_DEVICE", "CUDA", "CUDA_VISIBLE_DEVICES", "5"), "", with("local_device_ids", []any{float64(0)})},
		{"gpu one process per host", worker("PJRT_DEVICE", "CUDA", "LOCAL_WORLD_SIZE", "1", "LOCAL_RANK", "0"), "", base},
		{"gpu, JAX_LOCAL_DEVICE_IDS left to JAX", worker("PJRT_DEVICE", "CUDA", "JAX_LOCAL_DEVICE_IDS", "3"), "", base},
		{"overrides", worker(), "process_id=0, initialization_timeout=600, cluster_detection_method=None",
			with("process_id", float64(0), "initialization_timeout", float64(600), "cluster_detection_method", "<none>")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, out := jaxCall(t, jax, tc.env, tc.overrides)
			want := tc.want
			if want["cluster_detection_method"] == "<none>" {
				want["cluster_detection_method"] = nil // an explicit None passed through
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("jax.distributed.initialize(%v), want %v (%s)", got, want, out)
			}
		})
	}
	t.Run("older jax", func(t *testing.T) {
		got, out := jaxCall(t, fakeJax(t, fakeOldJaxDistributed), worker(), "")
		want := map[string]any{"coordinator_address": "10.1.2.3:29511", "num_processes": float64(4), "process_id": float64(3),
			"local_device_ids": nil}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%v, want %v (%s)", got, want, out)
		}
	})
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"not under tpurun", map[string]string{}, "RuntimeError: tpurun.jax_initialize: neither JAX_COORDINATOR_ADDRESS nor MASTER_ADDR is set"},
		{"no rank", map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "1", "WORLD_SIZE": "2"}, "RuntimeError: tpurun.jax_initialize: RANK is not set"},
		{"bad rank", worker("RANK", "x"), "RuntimeError: tpurun.jax_initialize: RANK='x' is not an integer"},
		{"rank past world", worker("RANK", "4"), "RuntimeError: tpurun.jax_initialize: RANK=4 is not below WORLD_SIZE=4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, out := jaxCall(t, jax, tc.env, "")
			if got != nil || !strings.HasPrefix(out, tc.want) {
				t.Fatalf("called with %v; said %q, want %q", got, out, tc.want)
			}
		})
	}
}
