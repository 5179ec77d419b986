package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/pymodule"
	"tpurun/internal/testutil"
	"tpurun/launcher"
)

// bin holds the tpurun and hello binaries built once by TestMain.
var bin string

// The verbs of testutil's fake worker that this package's tests use (this package defines a few of its own
// beside the tests that use them).
func init() {
	testutil.Register("exit", "exitready", "early", "raise", "crash", "hang", "hanguntil", "ignore", "catch",
		"exitongo", "fifoerr", "linkerr", "grandkids", "leavegroup", "closeout", "flood", "errflood", "long", "env",
		"report", "reportcrash", "reporthang", "reportfailfirst", "silent", "fail", "big", "seed0", "foreign",
		"notaframe", "cutframe", "dupflood", "foreignflood", "badthengood", "record", "failuntil")
}

// TestMain either plays a fake worker (testutil.Dispatch) or builds the real binaries and runs the tests. The
// test binary is a child subreaper so that workers orphaned by a SIGKILLed launcher can be reaped and proven gone.
func TestMain(m *testing.M) {
	testutil.Dispatch()
	// Worker output is unprefixed by default, as torchrun's; most tests here tell the ranks' lines apart, so they run
	// with torchrun's prefix template set to the rank (their Go workers' lines "[N] ..."). The tests of the default
	// (output_test.go) set it empty, which is unset.
	if err := os.Setenv(prefixTemplate, "[${rank}] "); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := testutil.SetSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "tpurun-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	if err := testutil.BuildStatic(dir, "tpurun/cmd/tpurun", "tpurun/examples/hello"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testutil.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// prefixTemplate is torchrun's variable for a prefix of worker output lines, which tpurun honours too.
const prefixTemplate = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

// upTimeout is a --timeout that fires once the workers are set up, even on a loaded machine (they take well under
// a second on an idle one): for the tests of what a timeout does to running workers.
var upTimeout = testutil.Scaled(5 * time.Second).String()

type result struct {
	code           int
	stdout, stderr string
}

// tpurun prepares the real binary with fake workers doing behaviour (extra env appended).
func tpurun(dir string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	cmd.Env = append(append(os.Environ(), "FAKE_DIR="+dir), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

// runCLI runs tpurun to its end (Deadline at most: a run that hangs is killed and fails the test).
func runCLI(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd, out, errb := tpurun(dir, env, args...)
	code := testutil.WaitExit(t, cmd)
	return result{code, out.String(), errb.String()}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{nil, "no PROGRAM given"},
		{[]string{"--nprocs", "0", "true"}, "--nprocs"},
		{[]string{"--bogus", "true"}, "unknown flag: --bogus"},
		{[]string{"--redirects", "7", "--", "true"}, "--redirects"},
		{[]string{"--log-format", "xml", "true"}, "--log-format"},
		{[]string{"--grace", "soon", "true"}, "--grace"},
	} {
		r := runCLI(t, t.TempDir(), nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.hint) {
			t.Errorf("tpurun %q: exit %d, stderr %q; want 2 and a message naming %q", tc.args, r.code, r.stderr, tc.hint)
		}
	}
}

// TestProgramNotFoundExit127: a PROGRAM that does not exist exits 127 and one that is not executable (or whose #!
// interpreter does not exist) 126, as in a shell, before any worker runs; each names the program.
func TestProgramNotFoundExit127(t *testing.T) {
	t.Parallel()
	noexec := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badInterp := filepath.Join(t.TempDir(), "train")
	if err := os.WriteFile(badInterp, []byte("#!/nonexistent/python9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for prog, want := range map[string]int{"/nonexistent/train": 127, "tpurun-no-such-program": 127, noexec: 126, badInterp: 126} {
		r := runCLI(t, t.TempDir(), nil, "--", prog)
		if r.code != want || !strings.Contains(r.stderr, prog) {
			t.Errorf("tpurun %s: exit %d, stderr %q; want %d naming it", prog, r.code, r.stderr, want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), nil, "--help")
	for _, want := range []string{"Usage:", "--nprocs", "--local-ranks-filter", "Exit codes:", "124"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("--help: exit %d, stdout lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}

func TestDemoHello(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), nil, "--nprocs", "4", "--", filepath.Join(bin, "hello"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for i := range 4 {
		if want := fmt.Sprintf("[%d] hello from rank %d of 4", i, i); !strings.Contains(r.stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "PEAK RSS") {
		t.Fatalf("no exit summary on stderr:\n%s", r.stderr)
	}
}

func TestTorchrunSpellingAndExitCode(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	r := runCLI(t, dir, []string{testutil.Fake("hang"), testutil.FakeRank(2, "exitready:85")},
		"--nproc_per_node", "3", "--log_format", "json", "--", testutil.Program(t))
	if r.code != 85 {
		t.Fatalf("exit %d, want rank 2's 85\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "[2] rank 2 exits 85") || !strings.Contains(r.stderr, `"level":"error"`) {
		t.Fatalf("stdout %q / stderr %q: want rank 2's prefixed line and json logs", r.stdout, r.stderr)
	}
	testutil.AssertAllGone(t, dir, 3)
}

func TestTimeoutExit124(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	r := runCLI(t, dir, []string{testutil.Fake("hang")}, "--nprocs", "2", "--timeout", upTimeout, "--", testutil.Program(t))
	if r.code != 124 || !strings.Contains(r.stderr, "timeout "+upTimeout+" expired") {
		t.Fatalf("exit %d, want 124\n%s", r.code, r.stderr)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestSIGTERMToLauncher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behaviour string
		code      int
	}{{"hang", 143}, {"catch:15", 143}} { // 143 also when the workers exit 0 on it: a preempted job never looks successful
		t.Run(tc.behaviour, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			cmd, out, errb := tpurun(dir, []string{testutil.Fake(tc.behaviour)}, "--nprocs", "2", "--", testutil.Program(t))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitReady(t, dir, 2)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			testutil.WaitExit(t, cmd)
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d\n%s", got, tc.code, errb.String())
			}
			if tc.behaviour == "catch:15" && strings.Count(out.String(), "caught SIGTERM") != 2 {
				t.Fatalf("workers did not all receive SIGTERM:\n%s", out.String())
			}
			if tc.behaviour == "hang" && strings.Count(errb.String(), "SIGTERM") < 2 {
				t.Fatalf("summary does not show the workers killed by SIGTERM:\n%s", errb.String())
			}
			testutil.AssertAllGone(t, dir, 2)
		})
	}
}

func TestSIGKILLedLauncherLeavesNoWorker(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("hang")}, "--nprocs", "4", "--", testutil.Program(t))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitReady(t, dir, 4)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitExit(t, cmd)
	testutil.AssertAllGone(t, dir, 4)
}

// TestConfigMistakesExit2: every mistake in the invocation or the configuration exits 2 before anything starts,
// at once (not after a rendezvous timeout), naming the flag or variable that holds it.
func TestConfigMistakesExit2(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		name string
	}{
		{nil, []string{"--master-addr", "1.2.3.4.5"}, "--master-addr"},
		{nil, []string{"--run-id", strings.Repeat("r", 300)}, "--run-id"},
		{nil, []string{"--run-id", ".."}, "--run-id"},
		{nil, []string{"--log-dir", file}, "--log-dir"},
		{nil, []string{"--node-rank", "abc"}, "--node-rank"},
		{nil, []string{"--grace", "0"}, "--grace"},
		{[]string{"PET_ROLE=a\nb"}, nil, "--role"},
		{nil, []string{"--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-id", "x", "--rdzv-endpoint", "127.0.0.1:99999"}, "--rdzv-endpoint"},
		{nil, []string{"--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-id", "x", "--rdzv-endpoint", "127.0.0.1:0",
			"--rdzv-conf", "is_host=false"}, "--rdzv-endpoint"},
		{nil, []string{"--nnodes", "4:2"}, "--nnodes"},
		{nil, []string{"--results", "/no/such/dir/x.json"}, "--results"},
		{nil, []string{"--results", filepath.Dir(file)}, "--results"},
	} {
		dir := testutil.FakeDir(t)
		// runCLI is bounded by the deadline: a mistake found only by a rendezvous timeout (5 min) fails there.
		r := runCLI(t, dir, append([]string{testutil.Fake("exit:0")}, tc.env...), append(append([]string{"--nprocs", "1"}, tc.args...), "--", testutil.Program(t))...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.name) {
			t.Errorf("%q %q: exit %d, want 2 naming %s:\n%s", tc.env, tc.args, r.code, tc.name, r.stderr)
		}
		if es, _ := os.ReadDir(filepath.Join(dir, "pids")); len(es) != 0 {
			t.Errorf("%q: %d workers started", tc.args, len(es))
		}
	}
}

// TestHelpVersionPythonPath: `tpurun help TOPIC` prints each topic (exit 2 for an unknown one), --version names
// the one version (the Python module's is the binary's), and --python-path prints a directory from which `import tpurun` works in a real Python.
func TestHelpVersionPythonPath(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{"env": "TPURUN_RESULT_ID", "exit-codes": "127", "multihost": "--master_addr", "python": "tpurun.spawn"} {
		if r := runCLI(t, t.TempDir(), nil, "help", topic); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("help %s: exit %d, stdout lacks %q:\n%s", topic, r.code, want, r.stdout)
		}
	}
	if r := runCLI(t, t.TempDir(), nil, "help", "nope"); r.code != 2 || !strings.Contains(r.stderr, "topics: env") {
		t.Errorf("help nope: exit %d, %s", r.code, r.stderr)
	}
	// One version: the embedded module's __version__ (what pip and make wheel install) is the binary's.
	if r := runCLI(t, t.TempDir(), nil, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "tpurun "+pymodule.Version()+" (go") ||
		launcher.Version != pymodule.Version() || !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(launcher.Version) {
		t.Errorf("--version: exit %d, %q; launcher.Version %q, the Python module's %q: want one version", r.code, r.stdout, launcher.Version, pymodule.Version())
	}
	home := t.TempDir()
	r := runCLI(t, t.TempDir(), []string{"HOME=" + home, "XDG_CACHE_HOME="}, "--python-path")
	dir := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(dir, home) {
		t.Fatalf("--python-path: exit %d, %q (want a directory under HOME=%s)\n%s", r.code, dir, home, r.stderr)
	}
	out, err := exec.Command("python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import tpurun; print(tpurun.__file__)", dir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), dir) {
		t.Fatalf("import tpurun from %s: %v\n%s", dir, err, out)
	}
}
