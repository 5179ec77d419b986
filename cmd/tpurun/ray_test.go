package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/pymodule"
	"tpurun/internal/testutil"
)

// TestRunHelperAsAnOrchestratorWould drives tpurun the way examples/ray_actor.py does: tpurun.run() from a
// Python thread that is not the main one, without stdin or a TTY, reading only the results document; a failing
// run maps to SpawnError with the worker's exit code and root cause.
func TestRunHelperAsAnOrchestratorWould(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog.py")
	if err := os.WriteFile(prog, []byte(`import os, sys, tpurun
if os.environ.get("RANK") == os.environ.get("FAIL_RANK"):
    sys.exit(3)
for r in tpurun.replicas():
    tpurun.report(r, {"replica": r, "rank": int(os.environ["RANK"])})
`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import os, sys, threading, tpurun
tp, py, prog = sys.argv[1:4]
out = []
def actor():
    doc = tpurun.run(["--nprocs", "3", "--expect-results", "--", py, prog], tpurun=tp)
    out.append(sorted((r["replica"], r["value"]["rank"]) for r in doc["results"]))
    try:
        tpurun.run(["--nprocs", "2", "--", py, prog], tpurun=tp, env=dict(os.environ, FAIL_RANK="1"))
    except tpurun.SpawnError as e:
        out.append(("SpawnError", e.exit_code, str(e).splitlines()[0]))
th = threading.Thread(target=actor)
th.start(); th.join()
print(out)
`
	cmd := exec.Command(py, "-c", script, filepath.Join(bin, "tpurun"), py, prog)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("%v\n%s\n%s", err, out, ee.Stderr)
	}
	want := "[[(0, 0), (1, 1), (2, 2)], ('SpawnError', 3, 'rank 1 (pid "
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("run() printed %q, want prefix %q", out, want)
	}
}

// TestRayExampleRunsTheSlice runs examples/ray_actor.py unchanged against a stand-in for the Ray calls it makes
// (testdata/fakeray: no Ray here) on a two-host v4-16 slice on loopback, the hosts listed to Ray in the opposite
// order (host 1 first, so the first actor lands on TPU worker 1). The example must claim the slice's head, put one
// actor on each of its hosts, and have their tpurun processes form one world of 8 ranks in the slice's own order:
// every rank's env equals `tpurun plan` of the slice on its host, whatever order Ray placed the actors in.
func TestRayExampleRunsTheSlice(t *testing.T) {
	t.Parallel()
	py := python(t)
	pydir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(testutil.FreeEndpoint(t))
	base := portBase(t)
	type rayHost struct {
		Resources map[string]int    `json:"resources"`
		Env       map[string]string `json:"env"`
	}
	hosts := []*host{newHost(t, idV4, 4), newHost(t, idV4, 4)}
	var cluster []rayHost
	for _, i := range []int{1, 0} {
		h := hosts[i]
		env := map[string]string{"TPURUN_SYSFS_ROOT": h.sys, "TPURUN_DEV_ROOT": h.dev, "TPU_ACCELERATOR_TYPE": "v4-16",
			"TPU_WORKER_ID": strconv.Itoa(i), "TPU_WORKER_HOSTNAMES": "127.0.0.1,127.0.0.2", "TPU_NAME": "slice-a",
			"FAKE_RAY_TPU_CHIPS": "4"}
		for _, kv := range h.env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		res := map[string]int{"TPU": 4, "slice-a": 1}
		if i == 0 {
			res["TPU-v4-16-head"] = 1
		}
		cluster = append(cluster, rayHost{res, env})
	}
	spec, err := json.Marshal(cluster)
	mustDo(t, err)
	cmd := exec.Command(py, filepath.Join(examplesDir(t), "ray_actor.py"), "--tpu", "v4-16", "--rdzv-conf", "port="+port,
		"--tpu-port-base", strconv.Itoa(base), "--rdzv-timeout", joinTimeout, "--", self(t))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("testdata", "fakeray")+":"+pydir,
		"TPURUN="+filepath.Join(bin, "tpurun"), "FAKE_RAY_HOSTS="+string(spec))
	var errb testutil.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ray_actor.py: %v\nstdout:\n%s\nstderr:\n%s", err, out, errb.String())
	}
	if n := strings.Count(string(out), "slice-a host: "); n != 2 || strings.Count(string(out), "world of 8 rank(s): ok") != 2 {
		t.Fatalf("ray_actor.py printed %q; want two hosts, each ok in a world of 8", out)
	}
	checkWorldEnv(t, hosts, 4, func(int) []string { return []string{"TPU_ACCELERATOR_TYPE=v4-16"} },
		"--tpu-port-base", strconv.Itoa(base))
}
