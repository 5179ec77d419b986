package main

// --preload: one interpreter imports the modules once and forks every worker. These tests run the real binary
// with real interpreters: what a forked worker sees is compared with what the same program sees exec'd, the
// refusals name the module and what it did, restarts fork again from the same interpreter, nothing outlives a
// SIGKILLed tpurun, and a real torch DDP step trains in forked workers.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/pymodule"
	"tpurun/internal/testutil"
	"tpurun/worker"
)

// probeSource writes what the program sees into $PROBE_DIR/<label>-<rank>.json: environment (bytes, as latin-1),
// argv, sys.path, __main__, flags, stdio, descriptors, signals, process group and parent. dump() is also a --fn target.
const probeSource = `import json, os, random, signal, sys

def state(label):
    m = sys.modules["__main__"]
    loader = getattr(m, "__loader__", None)
    spec = getattr(m, "__spec__", None)
    fds = {}
    for fd in range(4):
        try:
            link = os.readlink("/proc/self/fd/%d" % fd)
            fds[fd] = [link.split("[")[0], os.get_inheritable(fd)]
        except OSError as e:
            fds[fd] = str(e)
    sigs = {}
    for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGHUP", "SIGUSR1", "SIGCHLD", "SIGXFSZ"):
        h = signal.getsignal(getattr(signal, name))
        sigs[name] = getattr(h, "__name__", str(h))
    with open("/proc/%d/comm" % os.getppid()) as f:
        parent = f.read().strip()
    umask = os.umask(0o22)
    os.umask(umask)
    return {
        "env": {k.decode("latin-1"): v.decode("latin-1") for k, v in os.environb.items()},
        "argv": sys.argv, "orig_argv": sys.orig_argv, "path": sys.path, "cwd": os.getcwd(),
        "main": {"name": m.__name__, "file": getattr(m, "__file__", None), "cached": getattr(m, "__cached__", None),
                 "package": getattr(m, "__package__", None), "doc": getattr(m, "__doc__", None),
                 "spec": spec.name if spec is not None else None,
                 "loader": [getattr(loader, "__name__", type(loader).__name__), getattr(loader, "name", None),
                            getattr(loader, "path", None)],
                 "keys": sorted(k for k in vars(m) if k.startswith("__"))},
        "guarded": label,
        "flags": repr(sys.flags), "executable": sys.executable,
        "stdio": [[s.line_buffering, s.write_through, s.encoding, s.errors, type(s.buffer).__name__]
                  for s in (sys.stdin, sys.stdout, sys.stderr)],
        "fds": fds, "signals": sigs, "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pgid_is_pid": os.getpgid(0) == os.getpid(), "parent": parent, "umask": umask,
        "gc": __import__("gc").isenabled(),
    }

def dump(index=0, label="fn"):
    s = state(label)
    s["random"] = random.getrandbits(64)
    with open(os.path.join(os.environ["PROBE_DIR"], "%s-%s.json" % (label, os.environ["RANK"])), "w") as f:
        json.dump(s, f)
    return index

if __name__ == "__main__":
    dump(label=os.environ["PROBE_LABEL"])
`

// runUnique are the variables whose values every run picks afresh (a random tag, a scratch directory, a pipe's
// inode, a free port): both runs must set them, to values that cannot be compared.
var runUnique = []string{worker.EnvSweepTag, "TORCHELASTIC_ERROR_FILE", worker.EnvResultID, "JAX_COORDINATOR_ADDRESS"}

// probeTree writes the probe as a script, a symlink to it from another directory, a package with a module and a
// __main__, and returns the directory to run from.
func probeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	other := t.TempDir()
	for path, src := range map[string]string{"probe.py": probeSource, "pkg/__init__.py": "", "pkg/mod.py": probeSource,
		"pkg/__main__.py": probeSource, filepath.Join(other, "real.py"): probeSource} {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(other, "real.py"), filepath.Join(dir, "alias.py")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runIn runs the real binary in dir with env appended (FAKE_DIR: fake).
func runIn(t *testing.T, dir, fake string, env []string, args ...string) result {
	t.Helper()
	cmd, out, errb := tpurun(fake, env, args...)
	cmd.Dir = dir
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// TestPreloadSameAsExec: for a script, a script behind a symlink, -m pkg.mod, -m pkg (its __main__), interpreter
// flags and function mode, every rank of a forked worker sees exactly what the exec'd one sees: the environment
// byte for byte but for the preload marker, argv, sys.orig_argv, sys.path, the working directory, __main__ (name,
// file, loader, spec, keys), sys.flags, stdio, descriptors 0..3, signal handlers and mask, its own process group
// and tpurun as its parent; Python's random differs between ranks.
func TestPreloadSameAsExec(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := probeTree(t)
	port := strings.Split(testutil.FreeEndpoint(t), ":")[1]
	fake := t.TempDir()
	for _, tc := range []struct {
		label string
		args  []string
	}{
		{"script", []string{"--", py, "-u", "probe.py", "a", "${local_rank}"}},
		{"symlink", []string{"--", py, "-u", "alias.py", "b"}},
		{"module", []string{"-m", "pkg.mod", "c", "d"}},
		{"pkgmain", []string{"-m", "pkg"}},
		{"flags", []string{"--", py, "-B", "-X", "dev", "-W", "ignore", "probe.py"}},
		{"fn", []string{"--fn", "probe:dump", "--fn-args-json", `["fn"]`}},
	} {
		seen := map[string]map[string]any{}
		probes := t.TempDir() // one for both runs: its name is in the environment
		for _, preload := range []string{"", "json"} {
			args := append([]string{"--nprocs", "2", "--device", "cpu", "--run-id", "same", "--master-port", port, "--preload", preload}, tc.args...)
			env := []string{"PROBE_DIR=" + probes, "PROBE_LABEL=" + tc.label, "PYTHON_EXEC=" + py, "ODD=\xff\xfe bytes", "PYTHONPATH=" + dir}
			r := runIn(t, dir, fake, env, args...)
			if r.code != 0 {
				t.Fatalf("%s (preload %q): exit %d\n%s", tc.label, preload, r.code, r.stderr)
			}
			for rank := range 2 {
				file := filepath.Join(probes, fmt.Sprintf("%s-%d.json", tc.label, rank))
				b, err := os.ReadFile(file)
				_ = os.Remove(file)
				if err != nil {
					t.Fatalf("%s (preload %q) rank %d wrote nothing: %v\n%s", tc.label, preload, rank, err, r.stderr)
				}
				var s map[string]any
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				seen[preload+strconv.Itoa(rank)] = s
			}
		}
		for rank := range 2 {
			compareProbes(t, fmt.Sprintf("%s rank %d", tc.label, rank), seen[strconv.Itoa(rank)], seen["json"+strconv.Itoa(rank)])
		}
	}
}

// compareProbes checks that the forked worker saw what the exec'd one saw: the same environment but for the
// preload marker and the values each run picks afresh, and everything else equal.
func compareProbes(t *testing.T, what string, exec, fork map[string]any) {
	t.Helper()
	env := fork["env"].(map[string]any)
	if env[worker.EnvPreloaded] != "json" {
		t.Errorf("%s: %s=%v, want json", what, worker.EnvPreloaded, env[worker.EnvPreloaded])
	}
	delete(env, worker.EnvPreloaded)
	for _, s := range []map[string]any{exec, fork} {
		e := s["env"].(map[string]any)
		for _, k := range runUnique {
			if _, ok := e[k]; ok {
				e[k] = "(run-unique)"
			} else if k != "JAX_COORDINATOR_ADDRESS" {
				t.Errorf("%s: %s is not set", what, k)
			}
		}
		delete(s, "random")
	}
	for k := range exec {
		if k == "env" {
			diffEnv(t, what, exec[k].(map[string]any), env)
		} else if !reflect.DeepEqual(exec[k], fork[k]) {
			t.Errorf("%s: %s differs:\n exec'd: %v\n forked: %v", what, k, exec[k], fork[k])
		}
	}
}

// diffEnv reports every variable that differs between the exec'd and the forked worker's environment.
func diffEnv(t *testing.T, what string, exec, fork map[string]any) {
	t.Helper()
	for k, v := range exec {
		if fork[k] != v {
			t.Errorf("%s: %s=%q exec'd, %q forked", what, k, v, fork[k])
		}
	}
	for k, v := range fork {
		if _, ok := exec[k]; !ok {
			t.Errorf("%s: %s=%q forked only", what, k, v)
		}
	}
}

// TestPreloadRandomPerWorker: every forked worker has its own Python random state.
func TestPreloadRandomPerWorker(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := probeTree(t)
	probes := t.TempDir()
	r := runIn(t, dir, t.TempDir(), []string{"PROBE_DIR=" + probes, "PROBE_LABEL=r"}, "--nprocs", "4", "--device", "cpu", "--preload", "random",
		"--", py, "probe.py")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	got := map[float64]bool{}
	for rank := range 4 {
		b, _ := os.ReadFile(filepath.Join(probes, fmt.Sprintf("r-%d.json", rank)))
		var s map[string]any
		_ = json.Unmarshal(b, &s)
		got[s["random"].(float64)] = true
	}
	if len(got) != 4 {
		t.Fatalf("4 forked workers drew %d distinct random.getrandbits(64): %v", len(got), got)
	}
}

// preloadModules writes modules that are unsafe to preload, and a worker program that marks that it ran.
func preloadModules(t *testing.T) (mods, dev string) {
	t.Helper()
	mods = t.TempDir()
	root := t.TempDir()
	dev = filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "accel0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"poller":  "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), name='metrics-poller', daemon=True).start()\n",
		"tpuopen": fmt.Sprintf("import os\n_fd = os.open(%q, os.O_RDWR)\n", filepath.Join(dev, "accel0")),
		"ran":     "import os, sys\nopen(os.path.join(os.environ['MARK_DIR'], os.environ['RANK']), 'w').close()\n",
		"atfork":  "import os, threading, time\nos.register_at_fork(before=lambda: threading.Thread(target=time.sleep, args=(3600,), name='late-timer', daemon=True).start())\n",
	} {
		if err := os.WriteFile(filepath.Join(mods, name+".py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return mods, dev
}

// TestPreloadRefusesUnsafeModules: a module that starts a thread, and one that opens a (fake) TPU device node, at
// import are refused with exit 2 before any worker starts, naming the module, what it did and how to fix it; a
// thread that appears later (an os.register_at_fork hook) is found at the first fork, and no worker runs either.
func TestPreloadRefusesUnsafeModules(t *testing.T) {
	t.Parallel()
	py := python(t)
	mods, dev := preloadModules(t)
	for _, tc := range []struct {
		preload string
		want    []string
	}{
		{"json,poller", []string{`--preload="json,poller": importing poller started 1 thread besides the main one: 'metrics-poller' (Python thread`,
			"import poller inside the worker instead: drop it from the preload list (--preload json)"}},
		{"tpuopen", []string{"importing tpuopen opened the device node " + filepath.Join(dev, "accel0") + " (fd ",
			"4 results for replica 0", "import tpuopen inside the worker instead", "leave --preload out"}},
		{"atfork", []string{"the preloaded interpreter, after its imports, started 1 thread besides the main one: 'late-timer'",
			"os.register_at_fork hook"}},
	} {
		marks := t.TempDir()
		r := runCLI(t, "", []string{"PYTHONPATH=" + mods, "MARK_DIR=" + marks, "TPURUN_DEV_ROOT=" + dev},
			"--nprocs", "2", "--device", "cpu", "--preload", tc.preload, "--", py, filepath.Join(mods, "ran.py"))
		if r.code != 2 {
			t.Errorf("--preload %s: exit %d, want 2\n%s", tc.preload, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("--preload %s: stderr lacks %q:\n%s", tc.preload, w, r.stderr)
			}
		}
		if es, _ := os.ReadDir(marks); len(es) != 0 {
			t.Errorf("--preload %s: %d workers ran, want none", tc.preload, len(es))
		}
	}
}

// TestPreloadEnvTwinAndRefusals: TPURUN_PRELOAD is --preload's twin; a program that is not Python, --no-subreaper
// and a bad module name are refused with exit 2 and the fix.
func TestPreloadEnvTwinAndRefusals(t *testing.T) {
	t.Parallel()
	py := python(t)
	mods, _ := preloadModules(t)
	r := runCLI(t, "", []string{"TPURUN_PRELOAD=json, poller", "PYTHONPATH=" + mods}, "--nprocs", "1", "--device", "cpu", "--", py, "-c", "pass")
	if r.code != 2 || !strings.Contains(r.stderr, "-c runs a command string") {
		t.Errorf("TPURUN_PRELOAD with -c: exit %d, want 2 naming -c\n%s", r.code, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preload", "json", "--", "/bin/true"}, `PROGRAM "/bin/true" is not a Python interpreter`},
		{[]string{"--no-subreaper", "--preload", "json", "--", py, "x.py"}, "drop --no-subreaper"},
		{[]string{"--preload", "json,torch-xla", "--", py, "x.py"}, `"torch-xla" is not a Python module name`},
		{[]string{"--preload", "__main__", "--", py, "x.py"}, "__main__ names the main module of the program that called tpurun.spawn"},
	} {
		r := runCLI(t, "", nil, append([]string{"--nprocs", "1", "--device", "cpu"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 and %q\n%s", tc.args, r.code, tc.want, r.stderr)
		}
	}
}

// TestPreloadRestartForksAgain: after a failure the next attempt forks again from the same interpreter (imported
// once), and the summary has the forked workers' exits and resource usage.
func TestPreloadRestartForksAgain(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "flaky.py")
	src := `import os, sys
c = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print("attempt", c, "rank", os.environ["RANK"], "pid", os.getpid(), "imported", open(os.environ["IMPORTS"]).read().count("x"))
if c == 0 and os.environ["RANK"] == "1":
    sys.exit(5)
`
	counter := filepath.Join(dir, "imports")
	if err := os.WriteFile(filepath.Join(dir, "counted.py"), []byte("import os\nopen(os.environ['IMPORTS'], 'a').write('x')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", []string{"PYTHONPATH=" + dir, "IMPORTS=" + counter}, "-v", "--nprocs", "2", "--device", "cpu",
		"--max-restarts", "1", "--preload", "counted", "--", py, script)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 after one restart\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "preloaded interpreter ready"); n != 1 {
		t.Errorf("the interpreter was started %d times, want once\n%s", n, r.stderr)
	}
	if strings.Contains(r.stderr, "left processes behind") {
		t.Errorf("the preloaded interpreter was signalled as a worker's leftover at an attempt's end:\n%s", r.stderr)
	}
	for _, want := range []string{"attempt 0 rank 1", "attempt 1 rank 0", "attempt 1 rank 1", "exit 5", "attempt 1: done"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("no %q in the output:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if b, _ := os.ReadFile(counter); string(b) != "x" {
		t.Errorf("the preloaded module was imported %d times, want once", len(b))
	}
	_, last, _ := strings.Cut(r.stderr, "attempt 1: done")
	if n := len(regexp.MustCompile(`(?m)^  [01] +\d+ +ok +.* MiB$`).FindAllString(last, -1)); n != 2 {
		t.Errorf("the summary of attempt 1 has %d forked ranks with their exit and peak RSS, want 2:\n%s", n, last)
	}
}

// TestPreloadNothingOutlivesSIGKILL: with tpurun SIGKILLed, the preloaded interpreter and every forked worker die
// too (parent-death signals), while the workers are running their program.
func TestPreloadNothingOutlivesSIGKILL(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "hang.py")
	if err := os.WriteFile(script, []byte("import os, time\nopen(os.path.join(os.environ['MARK_DIR'], str(os.getpid())), 'w').close()\ntime.sleep(3600)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _, _ := tpurun(t.TempDir(), []string{"MARK_DIR=" + dir}, "--nprocs", "3", "--device", "cpu", "--preload", "json", "--", py, script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var tree []int
	testutil.Eventually(t, "3 forked workers running, and the interpreter", func() bool {
		es, _ := filepath.Glob(filepath.Join(dir, "[0-9]*"))
		tree = descendantsOf(cmd.Process.Pid)
		return len(es) == 3 && len(tree) >= 4
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for _, pid := range tree {
		testutil.WaitGone(t, pid) // reaped first when it is a zombie re-parented to this subreaper
	}
}

// descendantsOf lists every process below pid, from /proc/<pid>/task/*/children.
func descendantsOf(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil && !slices.Contains(out, c) {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}

// TestPreloadStopSignal: SIGTERM to tpurun is passed on to the forked workers (their own groups), which handle it
// and exit 0; as with exec'd workers tpurun then exits 143 (docs/CONTROL.md: a stop by signal N exits 128+N), says
// every rank finished cleanly, and neither signals nor waits for the preloaded interpreter as a leftover.
func TestPreloadStopSignal(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "term.py")
	src := `import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print("rank", os.environ["RANK"], "got SIGTERM", flush=True), sys.exit(0)))
open(os.path.join(os.environ["MARK_DIR"], os.environ["RANK"]), "w").close()
time.sleep(3600)
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out, errb := tpurun(t.TempDir(), []string{"MARK_DIR=" + dir}, "--nprocs", "2", "--device", "cpu", "--preload", "signal", "--", py, script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForFile(t, filepath.Join(dir, "0")) // both forked workers have their SIGTERM handler
	testutil.WaitForFile(t, filepath.Join(dir, "1"))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || !strings.Contains(errb.String(), "every rank finished cleanly") {
		t.Fatalf("exit %d, want 143 and \"every rank finished cleanly\" after a SIGTERM the workers handled\n%s", code, errb)
	}
	if strings.Contains(errb.String(), "left processes behind") {
		t.Errorf("the preloaded interpreter was treated as a worker's leftover:\n%s", errb)
	}
	for _, want := range []string{"[0] rank 0 got SIGTERM", "[1] rank 1 got SIGTERM"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in stdout:\n%s\n%s", want, out, errb)
		}
	}
}

// TestPreloadFnAndSpawnFork: --fn with --preload collects the results of forked workers; tpurun.spawn(...,
// start_method="fork") preloads the caller's script as __mp_main__ once and forks the workers from it, without
// a warning.
func TestPreloadFnAndSpawnFork(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	imports := filepath.Join(dir, "imports")
	caller := filepath.Join(dir, "caller.py")
	src := fmt.Sprintf(`import os, sys, warnings
import tpurun
if __name__ != "__main__":
    open(%q, "a").write(__name__ + "\n")

def work(index, scale):
    return [index * scale, os.environ.get("TPURUN_PRELOADED"), sys.modules["__main__"].__name__]

if __name__ == "__main__":
    warnings.simplefilter("error")  # start_method="fork" warned that it had no effect
    res = tpurun.spawn(work, args=(10,), nprocs=3, start_method=sys.argv[1], tpurun=sys.argv[2])
    print(sorted(res.items()))
`, imports)
	if err := os.WriteFile(caller, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]string{
		"fork":  `[(0, [0, '__main__', '__mp_main__']), (1, [10, '__main__', '__mp_main__']), (2, [20, '__main__', '__mp_main__'])]`,
		"spawn": `[(0, [0, None, '__mp_main__']), (1, [10, None, '__mp_main__']), (2, [20, None, '__mp_main__'])]`,
	} {
		_ = os.Remove(imports)
		cmd := exec.Command(py, caller, method, filepath.Join(bin, "tpurun"))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s: %v\n%s\n%s", method, err, out, ee.Stderr)
		}
		if strings.TrimSpace(string(out)) != want {
			t.Errorf("%s: printed %q, want %q", method, out, want)
		}
		b, _ := os.ReadFile(imports)
		if n, wantN := strings.Count(string(b), "__mp_main__"), map[string]int{"fork": 1, "spawn": 3}[method]; n != wantN {
			t.Errorf("%s: the caller's script was imported %d times as __mp_main__, want %d", method, n, wantN)
		}
	}
}

// TestPreloadTorchDDP: Debian's torch 1.13, preloaded once; two forked workers train one step of a tiny DDP model
// on gloo and end with the same parameters, and the same loss as exec'd workers.
func TestPreloadTorchDDP(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "ddp_step.py")
	src := `import os, sys
preloaded = "torch" in sys.modules
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(8, 4) * (rank + 1)).pow(2).mean()
loss.backward()
opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(every, flat)
print("rank %d preloaded=%s same-params=%s loss=%.6f" % (rank, preloaded, all(torch.equal(e, every[0]) for e in every), loss.item()))
dist.destroy_process_group()
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	losses := map[string][]string{}
	for _, preload := range []string{"torch,torch.distributed", ""} {
		r := runCLI(t, "", nil, "--nprocs", "2", "--device", "cpu", "--preload", preload, "--", torchPython, script)
		if r.code != 0 {
			t.Fatalf("--preload %q: exit %d\n%s\n%s", preload, r.code, r.stdout, r.stderr)
		}
		lines := regexp.MustCompile(`rank (\d) preloaded=(\w+) same-params=(\w+) loss=(\S+)`).FindAllStringSubmatch(r.stdout, -1)
		if len(lines) != 2 {
			t.Fatalf("--preload %q: want a line per rank in stdout:\n%s", preload, r.stdout)
		}
		slices.SortFunc(lines, func(a, b []string) int { return strings.Compare(a[1], b[1]) })
		for _, l := range lines {
			if l[2] != map[bool]string{true: "True", false: "False"}[preload != ""] || l[3] != "True" {
				t.Errorf("--preload %q: %s", preload, l[0])
			}
			losses[preload] = append(losses[preload], l[4])
		}
	}
	if !slices.Equal(losses[""], losses["torch,torch.distributed"]) {
		t.Errorf("losses differ: exec'd %v, forked %v", losses[""], losses["torch,torch.distributed"])
	}
}

// TestPreloadInterpreterKilledIsStartedAgain: when the preloaded interpreter dies between attempts (OOM killer),
// the next attempt starts it again and forks from the new one.
func TestPreloadInterpreterKilledIsStartedAgain(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "killer.py")
	src := `import glob, os, signal, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    sys.exit(0)
started = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank1-started")
if os.environ["RANK"] == "0":
    # between attempts, as the OOM killer would: once both workers are forked, never in the middle of the start
    while not os.path.exists(started):
        time.sleep(0.01)
    # the interpreter: tpurun's oldest child running preload.py (its forked workers show the same command line)
    found = []
    for f in glob.glob("/proc/%d/task/*/children" % os.getppid()):
        for pid in open(f).read().split():
            if int(pid) != os.getpid() and b"/preload.py" in open("/proc/%s/cmdline" % pid, "rb").read():
                found.append((int(open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[19]), int(pid)))
    print("killed the interpreter", min(found)[1], flush=True)  # said first: the stop may end rank 0 any time after
    os.kill(min(found)[1], signal.SIGKILL)
    sys.exit(3)
# rank 1 says it started, then waits for the stop that rank 0's failure brings: a failure of its own could stop
# rank 0 before the kill
open(started, "w").close()
while True:
    signal.pause()
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", nil, "-v", "--nprocs", "2", "--device", "cpu", "--max-restarts", "1", "--preload", "json", "--", py, script)
	if r.code != 0 || !strings.Contains(r.stdout, "killed the interpreter") {
		t.Fatalf("exit %d, want 0 after a restart with a new interpreter\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stderr, "preloaded interpreter ready"); n != 2 || !strings.Contains(r.stderr, "the preloaded interpreter is gone: starting it again") {
		t.Errorf("want the interpreter started twice, the second time because it was gone:\n%s", r.stderr)
	}
}
