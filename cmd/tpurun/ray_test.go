package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/worker"
)

// TestRunHelperAsAnOrchestratorWould drives tpurun the way examples/ray_actor.py does: tpurun.run() from a
// Python thread that is not the main one, without stdin or a TTY, reading only the results document; a failing
// run maps to SpawnError with the worker's exit code and root cause.
func TestRunHelperAsAnOrchestratorWould(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	if _, err := worker.InstallPython(dir); err != nil {
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
