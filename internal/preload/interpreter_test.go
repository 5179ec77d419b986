package preload_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tpurun/internal/preload"
	"tpurun/internal/proc"
	"tpurun/internal/testutil"
	"tpurun/internal/topology"
)

// rp is the test binary's reaper: the workers a preloaded interpreter forks are re-parented to the test binary, its child
// subreaper, which adopts them. Nothing else in this package may wait for children (it would race the reaper).
var rp *proc.Reaper

func TestMain(m *testing.M) {
	if err := proc.SetSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rp = proc.NewReaper(nil)
	code := m.Run()
	rp.Close()
	os.Exit(code)
}

// python is the interpreter of these tests: python3 on PATH (any CPython 3.8+; torch is not needed here).
func python(t *testing.T) string {
	t.Helper()
	return testutil.Need(t, "python3")
}

// setup writes the given modules (name -> source) into a directory for them; it returns a Config for an interpreter
// that preloads the named modules, and that directory.
func setup(t *testing.T, modules map[string]string, names ...string) (preload.Config, string) {
	t.Helper()
	mods := t.TempDir()
	for name, src := range modules {
		if err := os.WriteFile(filepath.Join(mods, name+".py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := os.CreateTemp(t.TempDir(), "zygote-out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	env := append(os.Environ(), "PYTHONPATH="+mods)
	return preload.Config{Python: []string{python(t)}, Preload: names,
		Path0: mods, Env: env, Dir: mods, Stdout: out, Stderr: out, Reaper: rp,
		DeviceNodes: topology.DeviceNodeGlobs(), Lockfile: topology.DefaultLockfile}, mods
}

// refused starts a preloaded interpreter that must refuse, and returns why.
func refused(t *testing.T, cfg preload.Config) *preload.RefusedError {
	t.Helper()
	z, err := preload.Start(context.Background(), cfg)
	var re *preload.RefusedError
	if !errors.As(err, &re) {
		if z != nil {
			z.Close()
		}
		out, _ := os.ReadFile(cfg.Stdout.Name())
		t.Fatalf("Start: %v, want a *RefusedError\ninterpreter output:\n%s", err, out)
	}
	return re
}

// A module that starts a thread at import is refused before anything is forked, naming the module, the thread
// and the fix; the modules before it in the list are what the hint keeps.
func TestRefusesThreadAtImport(t *testing.T) {
	cfg, _ := setup(t, map[string]string{"poller": `import threading, time
threading.Thread(target=time.sleep, args=(3600,), name="poller-thread", daemon=True).start()
`}, "json", "poller")
	re := refused(t, cfg)
	if re.Module != "poller" || !strings.Contains(re.Problem, "importing poller started 1 thread") ||
		!strings.Contains(re.Problem, "'poller-thread' (Python thread") {
		t.Errorf("refusal %+v: want it to name poller and its thread poller-thread", re)
	}
	if !strings.Contains(re.Hint, "import poller inside the worker") || !strings.Contains(re.Hint, "--preload json") {
		t.Errorf("hint %q: want it to say import poller in the worker, --preload json", re.Hint)
	}
}

// A thread Python does not know (pthread_create from C) is found in /proc/self/task and refused too.
func TestRefusesNativeThread(t *testing.T) {
	cfg, _ := setup(t, map[string]string{"native": `import ctypes
libc = ctypes.CDLL(None)
tid = ctypes.c_ulong()
assert libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(libc.pause, ctypes.c_void_p), None) == 0
`}, "native")
	re := refused(t, cfg)
	if re.Module != "native" || !strings.Contains(re.Problem, "(native thread ") {
		t.Errorf("refusal %+v: want native and a native thread", re)
	}
}

// A module that opens a device node at import (a fake /dev tree's accel0) is refused naming the node; one that
// opens an ordinary file is not.
func TestRefusesDeviceNode(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "dev")
	for _, p := range []string{"accel0", "vfio/3", "nvidia0"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dev, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plain := filepath.Join(t.TempDir(), "weights.bin")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"accel0", "vfio/3", "nvidia0"} {
		src := fmt.Sprintf("import os\n_fd = os.open(%q, os.O_RDONLY)\n", filepath.Join(dev, node))
		cfg, _ := setup(t, map[string]string{"opener": src, "plain": fmt.Sprintf("_f = open(%q)\n", plain)}, "plain", "opener")
		cfg.DevRoot = dev
		re := refused(t, cfg)
		if re.Module != "opener" || !strings.Contains(re.Problem, "opened the device node "+filepath.Join(dev, node)+" (fd ") {
			t.Errorf("%s: refusal %+v: want opener and the node", node, re)
		}
	}
}

// The libtpu lockfile held by the interpreter (libtpu initialized at import) is refused.
func TestRefusesLibtpuLockfile(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "libtpu_lockfile")
	cfg, _ := setup(t, map[string]string{"libtpu_init": fmt.Sprintf(`import fcntl
_f = open(%q, "w")
fcntl.flock(_f, fcntl.LOCK_EX)
`, lock)}, "libtpu_init")
	cfg.Lockfile = lock
	re := refused(t, cfg)
	if re.Module != "libtpu_init" || !strings.Contains(re.Problem, "holds the libtpu lockfile "+lock) {
		t.Errorf("refusal %+v: want libtpu_init and the lockfile", re)
	}
}

// An import that raises is refused naming the module and the exception.
func TestRefusesImportError(t *testing.T) {
	cfg, _ := setup(t, map[string]string{"broken": "raise ImportError('no backend here')\n"}, "broken")
	re := refused(t, cfg)
	if re.Module != "broken" || !strings.Contains(re.Problem, "importing broken raised ImportError: no backend here") {
		t.Errorf("refusal %+v", re)
	}
}

// probe is a program a forked worker runs: it writes what it sees as JSON to its stdout and exits 7.
const probe = `import json, os, sys
fds = {}
for fd in range(4):
    fds[fd] = [os.readlink("/proc/self/fd/%d" % fd), os.get_inheritable(fd)]
json.dump({"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "env": dict(os.environ),
           "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0], "cwd": os.getcwd(), "fds": fds,
           "name": __name__, "file": __file__, "preloaded": "preloaded_mod" in sys.modules,
           "others": sorted(os.listdir("/proc/self/fd")), "odd_hex": os.environb[b"ODD"].hex()}, sys.stdout)
sys.stdout.flush()
sys.exit(7)
`

// probeSeen is what the probe program reported.
type probeSeen struct {
	PID, PPID, PGID int
	Env             map[string]string
	Argv            []string
	OrigArgv        []string `json:"orig_argv"`
	OddHex          string   `json:"odd_hex"`
	Path0, Cwd      string
	Fds             map[string][]any
	Name, File      string
	Preloaded       bool
	Others          []string
}

// forkProbe forks the probe from z and returns what it saw, the process and its delivered exit.
func forkProbe(t *testing.T, z *preload.Interpreter, mods string) (probeSeen, *proc.Process, <-chan proc.Exit) {
	t.Helper()
	outR, outW, _ := os.Pipe()
	resR, resW, _ := os.Pipe()
	defer outR.Close()
	defer resR.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	env := []string{"RANK=3", "ODD=\xff\xfe not utf-8", "PATH=" + os.Getenv("PATH")}
	cmd := preload.Command{Python: []string{python(t)}, Target: "probe.py", Args: []string{"--lr", "3\xff"}}
	got := make(chan proc.Exit, 1)
	p, err := z.Fork(rp, preload.Request{Command: cmd, Argv: []string{"python3", "probe.py", "--lr", "3\xff"}, Env: env,
		Dir: mods, Files: []*os.File{devnull, outW, outW, resW}}, func(p *proc.Process) { got <- p.Status() })
	outW.Close()
	resW.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(outR)
	var seen probeSeen
	if err := json.Unmarshal(b, &seen); err != nil {
		t.Fatalf("worker output %q: %v", b, err)
	}
	return seen, p, got
}

// A forked worker is adopted and held like an exec'd one: its own group, tpurun (here the test) its parent,
// exactly its environment, argv and descriptors 0..3, its exit delivered and its resource usage on Release.
func TestForkAdoptsWorker(t *testing.T) {
	cfg, mods := setup(t, map[string]string{"preloaded_mod": "X = 1\n", "probe": probe}, "preloaded_mod")
	z, err := preload.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	seen, p, got := forkProbe(t, z, mods)
	checkIdentity(t, seen, p.PID(), mods)
	checkDescriptors(t, seen)
	if ex := testutil.Done(t, "the exit of the forked worker", got); ex.ExitCode != 7 {
		t.Errorf("exit %+v, want code 7", ex)
	}
	if ex := p.Release(); ex.ExitCode != 7 || ex.MaxRSS <= 0 {
		t.Errorf("released %+v: want code 7 with resource usage", ex)
	}
	if !z.Alive() {
		t.Error("the zygote exited after forking")
	}
}

// checkIdentity: the worker is pid, in its own group, this process's child; it has the request's environment
// (not the interpreter's: what a wrapper such as a pyenv shim adds is added again), argv, sys.path[0], working
// directory and __main__, and the preloaded module.
func checkIdentity(t *testing.T, seen probeSeen, pid int, mods string) {
	t.Helper()
	if seen.PID != pid || seen.PPID != os.Getpid() || seen.PGID != seen.PID {
		t.Errorf("pid %d ppid %d pgid %d: want pid %d, parent %d (this subreaper), its own group", seen.PID, seen.PPID, seen.PGID, pid, os.Getpid())
	}
	if _, home := seen.Env["HOME"]; home || seen.Env["RANK"] != "3" || seen.OddHex != "fffe206e6f74207574662d38" || seen.Env["PATH"] == "" {
		t.Errorf("environment %q: want RANK, ODD (bytes kept) and PATH, and not the interpreter's HOME", seen.Env)
	}
	if !slices.Equal(seen.Argv[:2], []string{"probe.py", "--lr"}) || !slices.Equal(seen.OrigArgv[1:3], []string{"probe.py", "--lr"}) {
		t.Errorf("argv %q, orig_argv %q: want probe.py --lr ...", seen.Argv, seen.OrigArgv)
	}
	if seen.Path0 != mods || seen.Cwd != mods || seen.Name != "__main__" || seen.File != filepath.Join(mods, "probe.py") || !seen.Preloaded {
		t.Errorf("worker saw %+v: want sys.path[0] and cwd %s, __main__, the preloaded module", seen, mods)
	}
}

// checkDescriptors: the worker holds /dev/null at 0, the inheritable result pipe at 3, and nothing else but what
// this test process itself passes to every child (and the descriptor that listed them).
func checkDescriptors(t *testing.T, seen probeSeen) {
	t.Helper()
	want := append([]string{"0", "1", "2", "3"}, inherited(t)...)
	var extra []string
	for _, fd := range seen.Others {
		if !slices.Contains(want, fd) {
			extra = append(extra, fd)
		}
	}
	if len(extra) > 1 || len(seen.Others) < 4 {
		t.Errorf("open descriptors %v: want 0..3, what this test inherited without close-on-exec (%v) and the one listing them", seen.Others, want[4:])
	}
	if seen.Fds["0"][0] != "/dev/null" || !strings.HasPrefix(seen.Fds["3"][0].(string), "pipe:") || seen.Fds["3"][1] != true {
		t.Errorf("descriptors %v: want /dev/null at 0 and the inheritable result pipe at 3", seen.Fds)
	}
}

// Each forked worker has its own Python random state (CPython re-seeds after fork), and ends as CPython's main
// would: sys.exit codes, 1 after an uncaught exception, SIGINT after KeyboardInterrupt.
func TestForkedExitStatuses(t *testing.T) {
	cfg, mods := setup(t, map[string]string{"end": `import os, random, sys
print(random.getrandbits(64), flush=True)
how = sys.argv[1]
if how == "raise": raise ValueError("boom")
if how == "kbd": raise KeyboardInterrupt
if how == "msg": sys.exit("bye")
if how == "big": sys.exit(300)
sys.exit(int(how))
`}, "random")
	z, err := preload.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	seeds := map[string]bool{}
	for how, want := range map[string]proc.Exit{"0": {ExitCode: 0}, "5": {ExitCode: 5}, "raise": {ExitCode: 1}, "msg": {ExitCode: 1},
		"big": {ExitCode: 44}, "kbd": {ExitCode: -1, Signal: syscall.SIGINT}} {
		outR, outW, _ := os.Pipe()
		errR, errW, _ := os.Pipe()
		cmd := preload.Command{Python: []string{python(t)}, Target: "end.py", Args: []string{how}}
		got := make(chan proc.Exit, 1)
		p, err := z.Fork(rp, preload.Request{Command: cmd, Argv: []string{"python3", "end.py", how}, Env: os.Environ(), Dir: mods,
			Files: []*os.File{devnull, outW, errW, devnull}}, func(p *proc.Process) { got <- p.Status() })
		outW.Close()
		errW.Close()
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(outR)
		stderr, _ := io.ReadAll(errR)
		outR.Close()
		errR.Close()
		ex := testutil.Done(t, "the exit of the forked worker "+how, got)
		p.Release()
		seeds[strings.TrimSpace(string(out))] = true
		if ex.ExitCode != want.ExitCode || ex.Signal != want.Signal {
			t.Errorf("%s: exit %+v, want code %d signal %v; stderr:\n%s", how, ex, want.ExitCode, want.Signal, stderr)
		}
		if how == "raise" && (!strings.Contains(string(stderr), "ValueError: boom") || strings.Contains(string(stderr), "preload.py")) {
			t.Errorf("raise: stderr %q: want the traceback without the preloaded interpreter's frames", stderr)
		}
		if how == "msg" && string(stderr) != "bye\n" {
			t.Errorf("msg: stderr %q, want bye", stderr)
		}
	}
	if len(seeds) != 6 {
		t.Errorf("random.getrandbits(64) in 6 workers gave %d distinct values: %v", len(seeds), seeds)
	}
}

// Close ends the interpreter; forking afterwards is ErrGone.
func TestCloseThenForkIsGone(t *testing.T) {
	cfg, mods := setup(t, nil)
	z, err := preload.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pid := z.PID()
	z.Close()
	if z.Alive() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		t.Fatalf("preloaded interpreter %d still alive after Close", pid)
	}
	_, err = z.Fork(rp, preload.Request{Command: preload.Command{Python: cfg.Python, Target: "x.py"}, Dir: mods}, nil)
	if !errors.Is(err, preload.ErrGone) {
		t.Fatalf("Fork after Close: %v, want ErrGone", err)
	}
}

// A context canceled while the modules are imported kills the interpreter and returns the cause.
func TestStartCanceled(t *testing.T) {
	cfg, _ := setup(t, map[string]string{"slow": "import time\ntime.sleep(3600)\n"}, "slow")
	tmp := t.TempDir() // where the interpreter's code is written: its command line names it
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped by the test")
	time.AfterFunc(100*time.Millisecond, func() { cancel(stop) })
	z, err := preload.Start(ctx, cfg)
	if !errors.Is(err, stop) || z != nil {
		t.Fatalf("Start: %v, want the cancel cause", err)
	}
	if b, _ := os.ReadFile(cfg.Stdout.Name()); strings.Contains(string(b), "Traceback") {
		t.Errorf("the interpreter printed a traceback: %s", b)
	}
	for _, pid := range pidsOf(t, tmp) {
		t.Errorf("a preloaded interpreter (pid %d) is still running after Start was canceled", pid)
	}
	if es, _ := os.ReadDir(tmp); len(es) != 0 {
		t.Errorf("the interpreter's code is left in %s after Start was canceled: %v", tmp, es)
	}
}

// inherited lists the descriptors from 4 on that this test process holds without close-on-exec (given by whatever
// started it): every process it starts, exec'd or forked from the preloaded interpreter, has them too.
func inherited(t *testing.T) []string {
	t.Helper()
	es, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range es {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 4 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			out = append(out, e.Name())
		}
	}
	return out
}

// pidsOf lists the live processes whose command line holds s.
func pidsOf(t *testing.T, s string) []int {
	t.Helper()
	es, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if strings.Contains(string(b), s) && !strings.Contains(string(st), ") Z") {
			out = append(out, pid)
		}
	}
	return out
}

// A thread started after the imports (here by an os.register_at_fork hook, just before the first fork) is found
// when forking: the fork is refused, the worker never runs its program, and the interpreter exits.
func TestRefusesLateThread(t *testing.T) {
	cfg, mods := setup(t, map[string]string{"late": `import os, threading, time
def start():
    threading.Thread(target=time.sleep, args=(3600,), name="late-timer", daemon=True).start()
os.register_at_fork(before=start)
`, "ran": "open('ran', 'w').close()\n"}, "late")
	z, err := preload.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	cmd := preload.Command{Python: []string{python(t)}, Target: "ran.py"}
	_, err = z.Fork(rp, preload.Request{Command: cmd, Argv: []string{"python3", "ran.py"}, Env: os.Environ(), Dir: mods,
		Files: []*os.File{devnull, devnull, devnull, devnull}}, nil)
	var re *preload.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Problem, "'late-timer' (Python thread") {
		t.Fatalf("Fork: %v, want a refusal naming the thread late-timer", err)
	}
	testutil.Eventually(t, "the refusing interpreter to exit", func() bool { return !z.Alive() })
	if _, err := os.Stat(filepath.Join(mods, "ran")); err == nil {
		t.Error("the worker of a refused fork ran its program")
	}
}
