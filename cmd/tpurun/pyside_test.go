package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// realPython is the interpreter python3 on PATH runs (not a shim), so that a test can give it a PATH of its own.
var realPython = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	return strings.TrimSpace(string(out)), err
})

// pyRun runs Python with args in dir with exactly env (and PYTHONDONTWRITEBYTECODE) and returns its exit code,
// stdout and stderr.
func pyRun(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	py, err := realPython()
	if err != nil || py == "" {
		t.Fatalf("python3 is required for the Python module tests: %v", err)
	}
	cmd := exec.Command(py, args...)
	cmd.Dir, cmd.Env = dir, append(append([]string(nil), env...), "PYTHONDONTWRITEBYTECODE=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// pythonPathOf runs `tpurun --python-path` with home as HOME, so the copy lands in a cache of the test's own.
func pythonPathOf(t *testing.T, home string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), "--python-path")
	cmd.Env = []string{"HOME=" + home, "PATH=/nonexistent"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tpurun --python-path: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// spawnEnv is the environment of a Python program that imports the binary's copy of the module and names the
// binary in TPURUN (so each test checks its own point, not how spawn finds the binary).
func spawnEnv(t *testing.T, extra ...string) []string {
	home := t.TempDir()
	return append([]string{"HOME=" + home, "PATH=/nonexistent", "PYTHONPATH=" + pythonPathOf(t, home),
		"TPURUN=" + filepath.Join(bin, "tpurun")}, extra...)
}

// TestSpawnFindsItsBinaryOffPATH: a program whose PYTHONPATH came from `tpurun --python-path` runs that binary
// from tpurun.spawn though tpurun is not on its PATH (a venv, a CI job that built bin/tpurun); a copy that names
// no binary (pip's, or the checkout's) and no tpurun on PATH is a FileNotFoundError that says what to type.
func TestSpawnFindsItsBinaryOffPATH(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=/nonexistent", "PYTHONPATH=" + pythonPathOf(t, home)}
	spawn := `import tpurun; print(sorted(tpurun.spawn("fn_square:square", args=(10,), nprocs=2, extra_args=["--device", "cpu"]).items()))`
	r := pyRun(t, examplesDir(t), env, "-c", spawn)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "[(0, {'index': 0, 'square': 10,") || !strings.Contains(r.stdout, "(1, {'index': 1, 'square': 11,") {
		t.Fatalf("spawn with PYTHONPATH from tpurun --python-path, tpurun off PATH: exit %d\nstdout: %s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	checkout := filepath.Join(examplesDir(t), "..", "worker", "python")
	r = pyRun(t, examplesDir(t), []string{"HOME=" + home, "PATH=/nonexistent", "PYTHONPATH=" + checkout}, "-c", `import tpurun
try:
    tpurun.spawn("fn_square:square", nprocs=1)
except FileNotFoundError as e:
    print(e)
`)
	for _, want := range []string{"the tpurun binary was not found", "names no binary", "TPURUN=/path/to/tpurun",
		"PYTHONPATH=$(/path/to/tpurun --python-path)", "PATH (/nonexistent)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("without a binary anywhere: %q lacks %q\n%s", r.stdout, want, r.stderr)
		}
	}
}

// seedScript is xmp.spawn's lock example as its users write it (a multiprocessing.Manager().Lock() in args),
// with tpurun.Lock() beside it, passed in args and made by name in the workers. Each worker writes "in i" and
// "out i" inside each lock, to that lock's log; each log must show them in pairs.
const seedScript = `
import multiprocessing, sys, tpurun

def _mp_fn(index, lock, tlock, log):
    for k, held in enumerate((lock, tlock, tpurun.Lock("named"))):
        with held:
            for word in ("in", "out"):
                with open("%s.%d" % (log, k), "a") as f:  # a log per lock: different locks may be held at once
                    f.write("%s %d\n" % (word, index))
    return index

if __name__ == "__main__":
    lock = multiprocessing.Manager().Lock()
    print(sorted(tpurun.spawn(_mp_fn, args=(lock, tpurun.Lock(), sys.argv[1]), nprocs=3,
                              extra_args=["--device", "cpu"]).items()))
`

// TestSpawnSharedLocks: the seed example's Manager().Lock() works in the workers (they get the caller's
// multiprocessing authkey with the pickled arguments; before, each failed with AuthenticationError), and so do
// tpurun.Lock() passed in args and tpurun.Lock("name") made in the workers: every lock is held by one worker at a
// time.
func TestSpawnSharedLocks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script, log := filepath.Join(dir, "seed.py"), filepath.Join(dir, "log")
	mustDo(t, os.WriteFile(script, []byte(seedScript), 0o644))
	env := spawnEnv(t, "TMPDIR="+dir)
	r := pyRun(t, dir, env, script, log)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[(0, 0), (1, 1), (2, 2)]" {
		t.Fatalf("exit %d\nstdout: %s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for k, name := range []string{"Manager().Lock()", "tpurun.Lock()", `tpurun.Lock("named")`} {
		b, err := os.ReadFile(log + "." + strconv.Itoa(k))
		mustDo(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 3*2 {
			t.Fatalf("%s: %d log lines, want 6:\n%s", name, len(lines), b)
		}
		for i := 0; i < len(lines); i += 2 {
			in, out := lines[i], lines[i+1]
			if !strings.HasPrefix(in, "in ") || out != "out "+strings.TrimPrefix(in, "in ") {
				t.Fatalf("%s: lines %d-%d: %q then %q: two workers held it at once\n%s", name, i, i+1, in, out, b)
			}
		}
	}
}

// TestTracebackOnce: a worker's exception shows its traceback exactly once: in the SpawnError of tpurun.spawn
// (not also in the worker's output, its stderr tail and tpurun's root cause), and in tpurun's root cause for
// `tpurun --fn`.
func TestTracebackOnce(t *testing.T) {
	t.Parallel()
	env := spawnEnv(t)
	const line = `raise ValueError("replica %d diverged" % index)` // the source line every traceback shows
	r := pyRun(t, examplesDir(t), env, "-c", `import tpurun; tpurun.spawn("fn_square:boom", nprocs=2, extra_args=["--device", "cpu"])`)
	if n := strings.Count(r.stderr, line); r.code != 1 || n != 1 || !strings.Contains(r.stderr, "SpawnError: replica 1 (rank 1, pid ") {
		t.Fatalf("spawn: exit %d, the traceback's line %d times, want once, in the SpawnError:\n%s", r.code, n, r.stderr)
	}
	c := runCLI(t, t.TempDir(), nil, "--device", "cpu", "--nprocs", "2", "--python", python(t),
		"--fn", filepath.Join(examplesDir(t), "fn_square.py")+":boom")
	if n := strings.Count(c.stderr, line); c.code != 1 || n != 1 || !strings.Contains(c.stderr, "root cause: replica 1 (rank 1, pid ") {
		t.Fatalf("tpurun --fn: exit %d, the traceback's line %d times, want once, in the root cause:\n%s", c.code, n, c.stderr)
	}
}

// TestSpawnConfigErrorIsValueError: a configuration tpurun refuses (exit 2) raises what xmp.spawn raises for one,
// a ValueError, which is also a tpurun.SpawnError (SpawnConfigError) carrying tpurun's reason.
func TestSpawnConfigErrorIsValueError(t *testing.T) {
	t.Parallel()
	r := pyRun(t, examplesDir(t), spawnEnv(t), "-c", `import json, tpurun
try:
    tpurun.spawn("fn_square:square", nprocs=0, extra_args=["--device", "cpu"], stderr=-3)
except ValueError as e:
    print(json.dumps({"type": type(e).__name__, "spawn_error": isinstance(e, tpurun.SpawnError), "exit": e.exit_code,
                      "message": str(e)}))
`)
	var got struct {
		Type, Message string
		SpawnError    bool `json:"spawn_error"`
		Exit          int
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v: stdout %q\n%s", err, r.stdout, r.stderr)
	}
	if got.Type != "SpawnConfigError" || !got.SpawnError || got.Exit != 2 || !strings.Contains(got.Message, "--nprocs") {
		t.Fatalf("%+v", got)
	}
}

// TestJAXProcessEnv: every worker gets JAX_PROCESS_ID (its rank) and JAX_NUM_PROCESSES (the world size) beside
// JAX_COORDINATOR_ADDRESS, replacing a parent's, so a JAX program written for them runs:
// jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], int(os.environ["JAX_NUM_PROCESSES"]),
// int(os.environ["JAX_PROCESS_ID"])) (JAX itself reads neither).
func TestJAXProcessEnv(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), []string{"JAX_PROCESS_ID=7", "JAX_NUM_PROCESSES=9"}, "--device", "cpu", "--nprocs", "3",
		"--", python(t), "-c",
		`import os; print("jax", os.environ["JAX_PROCESS_ID"], os.environ["JAX_NUM_PROCESSES"], os.environ["RANK"], os.environ["JAX_COORDINATOR_ADDRESS"])`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	seen, coord := map[string]bool{}, ""
	for _, l := range strings.Split(r.stdout, "\n") {
		_, rest, ok := strings.Cut(l, "] jax ") // after the rank prefix
		f := strings.Fields(rest)
		if !ok || len(f) != 4 {
			continue
		}
		if f[0] != f[2] || f[1] != "3" || (coord != "" && f[3] != coord) {
			t.Fatalf("worker line %q: want JAX_PROCESS_ID = RANK, JAX_NUM_PROCESSES = 3, one coordinator", l)
		}
		seen[f[0]], coord = true, f[3]
	}
	if len(seen) != 3 || !seen["0"] || !seen["1"] || !seen["2"] {
		t.Fatalf("process ids %v, want 0, 1 and 2\n%s", seen, r.stdout)
	}
}

// TestHelpPythonSignatures: every `tpurun.NAME(...)` call that `tpurun help python` shows binds to the module's
// real signature (it showed report(value) where the function took (replica, value)).
func TestHelpPythonSignatures(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), nil, "help", "python")
	if r.code != 0 {
		t.Fatalf("tpurun help python: exit %d\n%s", r.code, r.stderr)
	}
	got := pyRun(t, t.TempDir(), spawnEnv(t), "-c", `import inspect, re, sys, tpurun
class Anything(dict):  # every other name in a call is a placeholder value
    def __missing__(self, name):
        return name
class Binder:
    def __getattr__(self, name):
        real = getattr(tpurun, name)
        return lambda *a, **kw: inspect.signature(real).bind(*a, **kw)
for call in re.findall(r"\btpurun\.\w+\(.*?\)(?=\s|;|$)", sys.argv[1], re.M):
    try:
        eval(call, {}, Anything(tpurun=Binder()))
        print("ok", call)
    except TypeError as e:
        print("MISMATCH", call, e)
`, r.stdout)
	if got.code != 0 || strings.Count(got.stdout, "ok tpurun.") < 5 || strings.Contains(got.stdout, "MISMATCH") ||
		!strings.Contains(got.stdout, "ok tpurun.report(value)") {
		t.Fatalf("exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
	t.Log(got.stdout)
}
