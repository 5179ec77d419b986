package testutil

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fake worker is the test binary re-executed to play a worker (or a helper process) doing one verb. The
// environment selects the verb as NAME[:ARG]:
//
//   - FAKE_VERB: this process only (a wrapper around tpurun, a grandchild a worker starts, a helper a test starts).
//     The fake worker removes it from its own environment first, so what it starts does not inherit it.
//   - TPURUN_FAKE_<RANK>, else TPURUN_FAKE: the workers a launcher starts (RANK is theirs).
//
// With FAKE_DIR set, every fake process records its pid in $FAKE_DIR/pids/<pid>, and a worker marks
// $FAKE_DIR/ready/<rank> once it is set up (its signal handling in place, its grandchildren started), which is
// what WaitReady waits for.
const (
	EnvVerb     = "FAKE_VERB"
	EnvFake     = "TPURUN_FAKE"
	EnvFakeDir  = "FAKE_DIR"
	envFakeRank = "TPURUN_FAKE_"
)

// A Verb is one behaviour of the fake worker. Run returns the process's exit code. Spawns names the verbs Run
// starts as children of its own (registered and counted as used with it).
type Verb struct {
	Name   string
	Run    func(w *Worker) int
	Spawns []string
}

// Worker is what a verb knows of its process.
type Worker struct {
	Verb string // the verb's name
	Arg  string // what followed "NAME:" ("" when nothing did)
	N    int    // Arg as a number (0 when it is none)
	Rank string // $RANK
	Dir  string // $FAKE_DIR ("" when unset)
	Args []string
}

var (
	verbs   = map[string]Verb{}
	usedMu  sync.Mutex
	used    = map[string]bool{}
	verbsMu sync.Mutex
)

// Register makes built-in verbs (by name, see builtin) available to this test binary. Call it from an init
// function of the package's tests, once per verb, in the file of the tests that use it: after a full run of the
// package's tests a registered verb that no test used fails the suite (Main), so that verbs do not outlive their
// tests.
func Register(names ...string) {
	for _, n := range names {
		v, ok := builtin()[n]
		if !ok {
			panic(fmt.Sprintf("testutil.Register(%q): no such built-in verb; Define a verb of the package's own", n))
		}
		verbsMu.Lock()
		_, done := verbs[n] // already there as what another verb spawns
		verbsMu.Unlock()
		if !done {
			Define(v)
		}
	}
}

// Define registers a verb of the package's own (one that needs the package's internals, or is used by it alone).
func Define(v Verb) {
	verbsMu.Lock()
	defer verbsMu.Unlock()
	if _, dup := verbs[v.Name]; dup {
		panic("testutil: verb registered twice: " + v.Name)
	}
	if v.Name == "" || strings.ContainsAny(v.Name, ":= ") || v.Run == nil {
		panic(fmt.Sprintf("testutil: bad verb %q", v.Name))
	}
	verbs[v.Name] = v
	for _, s := range v.Spawns {
		if _, ok := verbs[s]; !ok {
			if b, ok := builtin()[s]; ok {
				verbs[s] = b
			}
		}
	}
}

// use marks the verb of spec (NAME[:ARG]) used, with what it spawns (and they spawn), and returns spec; an
// unregistered name panics, so a typo fails at once instead of running a worker that does nothing.
func use(spec string) string {
	name, _, _ := strings.Cut(spec, ":")
	verbsMu.Lock()
	defer verbsMu.Unlock()
	if _, ok := verbs[name]; !ok {
		panic(fmt.Sprintf("testutil: verb %q is not registered in this test binary (testutil.Register or Define)", name))
	}
	usedMu.Lock()
	defer usedMu.Unlock()
	for todo := []string{name}; len(todo) > 0; {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if !used[n] {
			used[n] = true
			todo = append(todo, verbs[n].Spawns...)
		}
	}
	return spec
}

// Uses marks verbs used by a test that may skip (Need) before it names them, as os/exec's tests do with
// maySkipHelperCommand: a skipped test does not make its verbs look stale.
func Uses(verbs ...string) {
	for _, v := range verbs {
		use(v)
	}
}

// Fake is the environment entry that makes every worker a launcher starts do spec (NAME[:ARG]).
func Fake(spec string) string { return EnvFake + "=" + use(spec) }

// FakeRank is the environment entry that makes the worker of one rank do spec, whatever Fake says.
func FakeRank(rank int, spec string) string {
	return envFakeRank + strconv.Itoa(rank) + "=" + use(spec)
}

// Self is the environment entry that makes the one process it is given to (not its children) do spec.
func Self(spec string) string { return EnvVerb + "=" + use(spec) }

// Command is the test binary as a process doing spec, with args and the test's environment.
func Command(spec string, args ...string) *exec.Cmd {
	cmd := exec.Command(Executable(), args...)
	cmd.Env = append(Without(os.Environ(), EnvVerb+"="), Self(spec))
	return cmd
}

// Executable is the path of the test binary.
var Executable = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
})

// Dispatch makes this process the fake worker it was started as (FAKE_VERB, TPURUN_FAKE_<RANK>, TPURUN_FAKE):
// it runs the verb and exits with its code. In the test binary itself it returns. Call it first thing in
// TestMain, after the verbs are registered (init functions run before TestMain).
func Dispatch() {
	if spec, ok := selected(); ok {
		os.Exit(runVerb(spec))
	}
	if id, ok := os.LookupEnv("TORCHELASTIC_RUN_ID"); ok && os.Getenv("RANK") != "" {
		// A launcher started this binary as a worker without a verb: running the whole suite inside a worker
		// would hang the test that started it.
		fmt.Fprintf(os.Stderr, "fake worker: rank %s of run %s was started without %s or %s; a test forgot testutil.Fake\n",
			os.Getenv("RANK"), id, EnvFake, EnvVerb)
		os.Exit(98)
	}
	QuickExit()
	if err := DefaultSignals(); err != nil {
		fmt.Fprintln(os.Stderr, "testutil: giving SIGHUP and SIGINT their default action:", err)
		os.Exit(1)
	}
}

// DispatchBuiltin is the main function of the fake worker program (package fakeworker, see Program): every built-in
// verb registered, it runs the selected one and exits with its code; with none selected it exits 98.
func DispatchBuiltin() {
	for n := range builtin() {
		Register(n)
	}
	// A verb that blocks for good (select {}) must block, as in a test binary, whose other goroutines keep the
	// runtime from calling it a deadlock ("all goroutines are asleep", exit 2): a pending timer does the same here.
	go func() {
		for {
			time.Sleep(time.Hour)
		}
	}()
	spec, ok := selected()
	if !ok {
		fmt.Fprintf(os.Stderr, "fake worker: no verb selected (%s, %s or %s<RANK>)\n", EnvVerb, EnvFake, envFakeRank)
		os.Exit(98)
	}
	os.Exit(runVerb(spec))
}

// Program is the fake worker program (package fakeworker): the built-in verbs at a hundredth of the start-up cost
// of the race-built test binary (Executable). It is built once per test binary, on first use, without the race
// detector and statically (CGO_ENABLED=0, as tpurun), into a directory that Run removes. A test gives it as the
// workers' PROGRAM wherever they do built-in verbs; a verb of the package's own (Define) needs Executable.
func Program(t testing.TB) string {
	t.Helper()
	p, err := program()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var programDir string

var program = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tpurun-fakeworker-")
	if err != nil {
		return "", err
	}
	programDir = dir
	if err := BuildStatic(dir, "tpurun/internal/testutil/fakeworker"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "fakeworker"), nil
})

// BuildStatic builds the main packages pkgs into dir as `make build` does (CGO_ENABLED=0: the static binary users
// get), with the go command that runs the tests (GOROOT/bin is on its PATH): tpurun/cmd/tpurun as tpurun and, built
// with -tags etcd, as tpurun-etcd beside it (the binary tpurun hands an etcd run to). The error holds the go
// command's output.
func BuildStatic(dir string, pkgs ...string) error {
	goTool := "go"
	if p, err := exec.LookPath("go"); err == nil {
		goTool = p
	}
	for _, pkg := range pkgs {
		builds := [][]string{{"build", "-o", dir, pkg}}
		if pkg == "tpurun/cmd/tpurun" {
			builds = append(builds, []string{"build", "-tags", "etcd", "-o", filepath.Join(dir, "tpurun-etcd"), pkg})
		}
		for _, args := range builds {
			build := exec.Command(goTool, args...)
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// QuickExit makes the test binaries that this one starts (fake workers, helper processes) exit at once when they
// are built with -race: the race runtime otherwise sleeps a second at every exit (GORACE's atexit_sleep_ms,
// default 1000) to let other goroutines report, which a fake worker does not need and which made every worker of
// every test take a second longer. A GORACE the caller set for atexit_sleep_ms is kept.
func QuickExit() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		_ = os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

// Run runs the tests (m.Run) and, after a run of every test that passed, fails the suite when a registered verb
// was never used. It returns the exit code for os.Exit.
func Run(m *testing.M) int {
	code := m.Run()
	if programDir != "" {
		_ = os.RemoveAll(programDir)
	}
	if left := SweepChildren(); len(left) > 0 {
		// A failed test (or one that let its processes go) must not leave them running past the suite: a tpurun and
		// its workers asleep for the rest of the machine's day. After tests that all passed, a process left behind
		// (running, or exited and never waited for) is a test that does not clean up after itself: it fails the run.
		fmt.Fprintf(os.Stderr, "testutil: killed %d processes the tests left behind: %s\n", len(left), strings.Join(left, ", "))
		if code == 0 {
			fmt.Fprintln(os.Stderr, "testutil: every test passed but left these processes behind: wait for what a test starts (testutil.Watch reaps a job re-parented to this binary)")
			code = 1
		}
	}
	if code == 0 && ranEverything() {
		for _, n := range unused() {
			fmt.Fprintf(os.Stderr, "testutil: fake worker verb %q is registered but no test used it: remove it, or its Register\n", n)
			code = 1
		}
	}
	return code
}

// ranEverything reports whether this run ran every test (no -run, -skip or -list filter, not -short).
func ranEverything() bool {
	for _, f := range []string{"test.run", "test.skip", "test.list"} {
		if fl := flag.Lookup(f); fl != nil && fl.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}

func unused() []string {
	verbsMu.Lock()
	defer verbsMu.Unlock()
	usedMu.Lock()
	defer usedMu.Unlock()
	var out []string
	for n := range verbs {
		if !used[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// selected is the verb this process was started to do, if any.
func selected() (string, bool) {
	if v, ok := os.LookupEnv(EnvVerb); ok {
		_ = os.Unsetenv(EnvVerb)
		return v, true
	}
	if r, ok := os.LookupEnv("RANK"); ok {
		if v, ok := os.LookupEnv(envFakeRank + r); ok {
			return v, true
		}
	}
	return os.LookupEnv(EnvFake)
}

func runVerb(spec string) int {
	name, arg, _ := strings.Cut(spec, ":")
	verbsMu.Lock()
	v, ok := verbs[name]
	verbsMu.Unlock()
	if !ok {
		fmt.Fprintf(os.Stderr, "fake worker: verb %q is not registered in this test binary\n", name)
		return 98
	}
	n, _ := strconv.Atoi(arg)
	w := &Worker{Verb: name, Arg: arg, N: n, Rank: os.Getenv("RANK"), Dir: os.Getenv(EnvFakeDir), Args: os.Args[1:]}
	if w.Dir != "" {
		// its start time with it: a test tells this process from a later one given the same pid
		_ = w.WriteWhole(filepath.Join(w.Dir, "pids", strconv.Itoa(os.Getpid())), []byte(startTime(os.Getpid())))
	}
	return v.Run(w)
}

// Without is env without the entries that start with prefix.
func Without(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
