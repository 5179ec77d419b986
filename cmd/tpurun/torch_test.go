package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"tpurun/internal/testutil"
)

// torchPython is the interpreter with Debian's python3-torch (the PATH python3 may be a build without torch).
const torchPython = testutil.TorchPython

// needTorch skips without torch locally and fails in CI (CI=true), where .ci/run installs python3-torch. Real
// PyTorch workers are a heavy test: it takes the slot.
func needTorch(t *testing.T) string {
	t.Helper()
	testutil.Need(t, "torch")
	testutil.Heavy(t)
	script, err := filepath.Abs("../../examples/torch_allreduce.py")
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// A real gloo all_reduce over env:// under tpurun, called the torchrun way: PROGRAM.py runs as $PYTHON_EXEC -u.
func TestTorchAllReduceFourCPUWorkers(t *testing.T) {
	script := needTorch(t)
	r := runCLI(t, "", []string{"PYTHON_EXEC=" + torchPython}, "--nproc_per_node", "4", "--device", "cpu", script)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 4 {
		want := "rank " + string(rune('0'+rank)) + "/4 (local " + string(rune('0'+rank)) + "): all_reduce sum 10"
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no line %q in stdout:\n%s", want, r.stdout)
		}
	}
}

// One rank raises: PyTorch's @record writes TORCHELASTIC_ERROR_FILE, the report shows that traceback as the
// root cause, and tpurun exits with the worker's code (1).
func TestTorchFailingRankRootCause(t *testing.T) {
	script := needTorch(t)
	r := runCLI(t, "", []string{"PYTHON_EXEC=" + torchPython, "FAIL_RANK=2"}, "--nproc-per-node", "4", "--device", "cpu", script)
	if r.code != 1 {
		t.Fatalf("exit %d, want the worker's 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	_, cause, ok := strings.Cut(r.stderr, "root cause: rank 2")
	if !ok {
		t.Fatalf("no root cause naming rank 2 in stderr:\n%s", r.stderr)
	}
	// The traceback must come from the error file @record wrote, not only from the stderr tail; without --log-dir
	// that file is gone when the summary is printed, so the summary names no path.
	if !regexp.MustCompile(`error from its TORCHELASTIC_ERROR_FILE: RuntimeError: rank 2 was asked to fail \(FAIL_RANK=2\)\n(    .*\n)*    Traceback`).MatchString(cause) {
		t.Errorf("the root cause lacks the TORCHELASTIC_ERROR_FILE traceback:\n%s", cause)
	}
}
