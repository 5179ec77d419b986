package main

// The fault matrix (docs/FAULTS.md): every case drives the built tpurun binary with fake workers re-executed from
// this test binary, asserts the exit code and the message on stderr, and proves that no process of the run
// survives: every worker and grandchild pid the fakes recorded answers kill(pid, 0) with ESRCH, and no process
// left on the machine carries the run's FAKE_DIR in its environment.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
)

// The fault matrix's workers are testutil's verbs; two wrappers are this package's own: nofile:N runs its
// arguments with RLIMIT_NOFILE (soft and hard) N, which is how a test runs tpurun under `ulimit -n N`, and
// rusage:PATH runs them as a child and writes the child's peak RSS (its own and its descendants', from wait4) to
// PATH: a process keeps the peak RSS of the image it was forked from, so measuring tpurun through this small
// wrapper keeps the size of the test binary that started it out of the figure.
func init() {
	testutil.Define(testutil.Verb{Name: "nofile", Run: func(w *testutil.Worker) int {
		lim := syscall.Rlimit{Cur: uint64(w.N), Max: uint64(w.N)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			return 96
		}
		err := syscall.Exec(w.Args[0], w.Args, os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 96
	}})
	testutil.Define(testutil.Verb{Name: "rusage", Run: func(w *testutil.Worker) int {
		c := exec.Command(w.Args[0], w.Args[1:]...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		_ = c.Run()
		if c.ProcessState == nil {
			return 96
		}
		rss := c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
		_ = os.WriteFile(w.Arg, []byte(strconv.FormatInt(rss, 10)), 0o644)
		return c.ProcessState.ExitCode()
	}})
}

// assertNothingLeft proves that no process of the run survives: every recorded pid is gone
// (testutil.AssertAllGone) and no live process on the machine carries FAKE_DIR=dir in its environment (this
// catches workers that were killed before they could record their pid, and grandchildren).
func assertNothingLeft(t *testing.T, dir string, recorded int) {
	t.Helper()
	testutil.AssertAllGone(t, dir, recorded)
	needle := []byte("FAKE_DIR=" + dir + "\x00")
	testutil.WaitFor(t, "no process of the run left", func() error {
		var left []int
		es, _ := os.ReadDir("/proc")
		for _, e := range es {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err == nil && bytes.Contains(env, needle) {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // an orphan re-parented to this subreaper
				if syscall.Kill(pid, 0) == nil {
					left = append(left, pid)
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("processes of the run still alive after tpurun exited: %v", left)
		}
		return nil
	})
}

func wantStderr(t *testing.T, r result, code int, fragments ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, code, r.stderr)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stderr, f) {
			t.Fatalf("stderr lacks %q:\n%s", f, r.stderr)
		}
	}
}

// TestFaultWorker: one rank misbehaves, the others hang; tpurun exits with that rank's code, says which rank
// failed and how, and leaves nothing running.
func TestFaultWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		nprocs    int
		fault     string // rank 1's behaviour; the others hang
		args      []string
		code      int
		fragments []string
		recorded  int // pids recorded by workers and grandchildren
	}{
		{"exit-1", 3, "exitready:1", nil, 1, []string{"rank 1", "exit 1"}, 3},
		{"exit-255", 3, "exitready:255", nil, 255, []string{"rank 1", "exit 255"}, 3},
		{"sigkill", 3, "raise:9", nil, 137, []string{"rank 1", "SIGKILL"}, 3},
		{"sigsegv", 3, "raise:11", nil, 139, []string{"rank 1", "SIGSEGV"}, 3},
		{"timeout", 2, "hang", []string{"--timeout", upTimeout}, 124, []string{"timeout " + upTimeout + " expired"}, 2},
		{"ignores-sigterm", 3, "exitready:3", []string{"--grace", "500ms"}, 3, []string{"rank 1", "grace 500ms expired: SIGKILL to every worker group"}, 3},
		{"exits-during-start-up", 16, "early:4", nil, 4, []string{"rank 1", "exit 4"}, 15},
		{"grandchildren-ignore-sigterm", 3, "grandkids:7", []string{"--grace", "500ms"}, 7, []string{"rank 1", "exit 7"}, 3 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			others := "hang"
			if tc.name == "ignores-sigterm" {
				others = "ignore:15"
			}
			env := []string{testutil.Fake(others), testutil.FakeRank(1, tc.fault)}
			args := append(append([]string{"--nprocs", strconv.Itoa(tc.nprocs)}, tc.args...), "--", testutil.Program(t))
			r := runCLI(t, dir, env, args...) // bounded by the deadline: a teardown that hangs fails there
			wantStderr(t, r, tc.code, tc.fragments...)
			if tc.name == "exits-during-start-up" || tc.name == "timeout" {
				// rank 1 never records its pid (the timeout: a loaded machine may start a worker after it): count
				// only what was recorded, the /proc scan covers the rest.
				es, _ := os.ReadDir(filepath.Join(dir, "pids"))
				tc.recorded = len(es)
			}
			assertNothingLeft(t, dir, tc.recorded)
		})
	}
}

// TestFaultWorkerOutput: a worker that closes its stdout early or floods it neither hangs nor fails the run, and
// every line it wrote arrives whole.
func TestFaultWorkerOutput(t *testing.T) {
	t.Parallel()
	t.Run("closes-stdout-early", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		r := runCLI(t, dir, []string{testutil.Fake("closeout")}, "--nprocs", "2", "--", testutil.Program(t))
		wantStderr(t, r, 0, "[0] rank 0 still alive after closing stdout", "[1] rank 1 still alive after closing stdout")
		if !strings.Contains(r.stdout, "[1] rank 1 closes stdout") {
			t.Fatalf("stdout lacks the line written before closing:\n%s", r.stdout)
		}
		assertNothingLeft(t, dir, 2)
	})
	t.Run("floods-stdout", func(t *testing.T) {
		t.Parallel()
		testutil.Heavy(t) // 2 x 6.4 MB through tpurun and into this test's buffer
		dir := testutil.FakeDir(t)
		const lines = 100_000
		start := time.Now()
		r := runCLI(t, dir, []string{testutil.Fake("flood:" + strconv.Itoa(lines))}, "--nprocs", "2", "--", testutil.Program(t))
		wantStderr(t, r, 0)
		for rank := range 2 {
			whole := fmt.Sprintf("[%d] %s rank %d flood\n", rank, strings.Repeat("x", 50), rank)
			if got := strings.Count(r.stdout, whole); got != lines {
				t.Fatalf("rank %d: %d whole prefixed lines, want %d", rank, got, lines)
			}
			if !strings.Contains(r.stdout, fmt.Sprintf("[%d] rank %d flood done\n", rank, rank)) {
				t.Fatalf("rank %d: last line lost", rank)
			}
		}
		t.Logf("2 x %d lines in %s", lines, time.Since(start))
		assertNothingLeft(t, dir, 2)
	})
}

// TestFaultLauncherSignals: signals to tpurun itself.
func TestFaultLauncherSignals(t *testing.T) {
	t.Parallel()
	// A second stop signal kills at once: with a grace longer than the deadline, a second signal that is not
	// acted on fails the wait for tpurun's exit.
	longGrace := []string{"--grace", (2 * testutil.Deadline()).String()}
	for _, tc := range []struct {
		name    string
		fault   string
		sigs    []syscall.Signal
		args    []string
		code    int
		stdouts int // "caught" lines expected
	}{
		{"sigint-once", "hang", []syscall.Signal{syscall.SIGINT}, nil, 130, 0},
		// a stop by signal N exits 128+N also when the workers then exit 0: a preempted job does not look successful
		{"sigint-once-workers-exit-0", "catch:2", []syscall.Signal{syscall.SIGINT}, nil, 130, 2},
		{"sigint-twice", "ignore:2", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, longGrace, 130, 0},
		{"sigterm-twice", "ignore:15", []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, longGrace, 143, 0},
		// SIGHUP is forwarded, not a stop: the workers die of it, the first failure's code
		{"sighup", "hang", []syscall.Signal{syscall.SIGHUP}, nil, 129, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			args := append(append([]string{"--nprocs", "2"}, tc.args...), "--", testutil.Program(t))
			cmd, out, _ := tpurun(dir, []string{testutil.Fake(tc.fault)}, args...)
			errb := &testutil.Buffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitReady(t, dir, 2)
			for i, s := range tc.sigs {
				if i > 0 { // the second signal must find tpurun already stopping
					errb.WaitFor(t, "stopping all workers")
				}
				if err := cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			testutil.WaitExit(t, cmd)
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d\n%s", got, tc.code, errb.String())
			}
			if got := strings.Count(out.String(), "caught"); got != tc.stdouts {
				t.Fatalf("%d workers caught the signal, want %d:\n%s", got, tc.stdouts, out.String())
			}
			assertNothingLeft(t, dir, 2)
		})
	}
}

// TestFaultFDLimit: tpurun under `ulimit -n 40` asked for 64 workers fails with exit 70 naming RLIMIT_NOFILE and
// its value, and leaves none of the workers it did start running.
func TestFaultFDLimit(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cmd := testutil.Command("nofile:40", filepath.Join(bin, "tpurun"), "--nprocs", "64", "--", testutil.Program(t))
	cmd.Env = append(cmd.Env, "FAKE_DIR="+dir, testutil.Fake("hang"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := testutil.WaitExit(t, cmd)
	r := result{code, out.String(), errb.String()}
	wantStderr(t, r, 70, "RLIMIT_NOFILE is 40", "raise ulimit -n")
	es, _ := os.ReadDir(filepath.Join(dir, "pids"))
	assertNothingLeft(t, dir, len(es))
}

// TestFaultLogDirSymlink: a symlink planted where a log file goes is never followed. The run's directory is new
// (<run-id>_<random>), so the planter is a worker of attempt 0: it puts DIR/<run>_<random>/attempt_1/0/stdout.log
// -> victim there and fails; the restart refuses with exit 2 naming the link, the victim is untouched.
func TestFaultLogDirSymlink(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	logs := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// $TORCHELASTIC_ERROR_FILE is DIR/<run>_<random>/attempt_0/<local rank>/error.json.
	script := `run=$(dirname "$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")")
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$LOCAL_RANK" = 0 ] && mkdir -p "$run/attempt_1/0" &&
  ln -s "$VICTIM" "$run/attempt_1/0/stdout.log" && echo "$run/attempt_1/0/stdout.log" > "$FAKE_DIR/link" && exit 3
echo "attempt $TORCHELASTIC_RESTART_COUNT ran" >> "$FAKE_DIR/ran"`
	r := runCLI(t, dir, []string{"VICTIM=" + target}, "--nprocs", "2", "--max-restarts", "1", "--log-dir", logs,
		"--run-id", "planted", "--", "/bin/sh", "-c", script)
	link, err := os.ReadFile(filepath.Join(dir, "link"))
	if err != nil {
		t.Fatalf("attempt 0 planted no link: %v\nstderr:\n%s", err, r.stderr)
	}
	wantStderr(t, r, 2, strings.TrimSpace(string(link)), "is a symlink")
	if b, err := os.ReadFile(target); err != nil || string(b) != "precious\n" {
		t.Fatalf("symlink target changed: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ran")); strings.Contains(string(b), "attempt 1") {
		t.Fatalf("a worker of attempt 1 ran: %q", b)
	}

	// Without a planted link the log files are regular files of mode 0644 (umask aside), in a new run directory.
	r = runCLI(t, dir, []string{testutil.Fake("exitready:0")}, "--nprocs", "2", "--log-dir", logs, "--run-id", "planted", "--", testutil.Program(t))
	wantStderr(t, r, 0)
	runs, _ := filepath.Glob(filepath.Join(logs, "planted_*"))
	if len(runs) != 2 {
		t.Fatalf("run directories %v, want two (one per run)", runs)
	}
	for _, d := range runs {
		if d == filepath.Dir(filepath.Dir(filepath.Dir(strings.TrimSpace(string(link))))) {
			continue
		}
		for lr := range 2 {
			f := filepath.Join(d, "attempt_0", strconv.Itoa(lr), "stdout.log")
			fi, err := os.Lstat(f)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&^0o644 != 0 {
				t.Fatalf("log file %s: %v, %v; want a regular file, mode at most 0644", f, fi, err)
			}
		}
	}
	assertNothingLeft(t, dir, 2)
}

// TestFaultLogDirOutOfDisk: --log-dir on a full file system (a 64 KiB tmpfs) does not fail or hang the run: tpurun
// warns naming the file and the error, the console still gets every line, the log files hold what fit, nothing is
// left running.
func TestFaultLogDirOutOfDisk(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	testutil.Need(t, "tmpfs")
	logs := t.TempDir()
	if err := syscall.Mount("tpurun-test", logs, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a 64k tmpfs on %s: %v", logs, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(logs, syscall.MNT_DETACH) })
	const lines = 20_000 // 2 x 1.2 MB of output for 64 KiB of disk
	r := runCLI(t, dir, []string{testutil.Fake("flood:" + strconv.Itoa(lines))}, "--nprocs", "2", "--log-dir", logs,
		"--tee", "3", "--", testutil.Program(t))
	wantStderr(t, r, 0, "log file write failed", "no space left on device", filepath.Join(logs, ""))
	for rank := range 2 {
		if !strings.Contains(r.stdout, fmt.Sprintf("[%d] rank %d flood done\n", rank, rank)) {
			t.Fatalf("rank %d: console lost the last line", rank)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(logs, &st); err != nil || st.Bfree != 0 {
		t.Fatalf("the tmpfs was not filled (free blocks %d, %v): the case did not happen", st.Bfree, err)
	}
	assertNothingLeft(t, dir, 2)
}

// TestFaultSecretsNotLogged: a secret in tpurun's environment never appears in its own logs (debug, json), nor in
// the exit summary.
func TestFaultSecretsNotLogged(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-v4lue-never-logged"
	env := []string{testutil.Fake("exitready:3"), "HF_TOKEN=" + secret, "MY_API_KEY=" + secret, "DB_PASSWORD=" + secret, "AWS_SECRET_ACCESS_KEY=" + secret}
	for _, format := range []string{"console", "json"} {
		dir := testutil.FakeDir(t)
		r := runCLI(t, dir, env, "-v", "--log-format", format, "--nprocs", "2", "--", testutil.Program(t))
		wantStderr(t, r, 3, "rank")
		if strings.Contains(r.stderr, secret) || strings.Contains(r.stdout, secret) {
			t.Fatalf("--log-format %s: the secret value appears in tpurun's output:\n%s\n%s", format, r.stderr, r.stdout)
		}
		assertNothingLeft(t, dir, 2)
	}
}

// TestFaultReportThenCrash: results that arrived before a worker crashed are kept in the --results document, the
// crashed rank's own result included, and the run still exits with the crash's code. The document replaces a
// symlink planted at its path (atomic rename) instead of writing through it, and has mode 0644.
func TestFaultReportThenCrash(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	doc := filepath.Join(t.TempDir(), "results.json")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, doc); err != nil { // planted: must be replaced, never written through
		t.Fatal(err)
	}
	r := runCLI(t, dir, []string{testutil.Fake("reporthang"), testutil.FakeRank(1, "reportcrash")},
		"--nprocs", "3", "--results", doc, "--", testutil.Program(t))
	wantStderr(t, r, 137, "rank 1", "SIGKILL")
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("--results wrote through a planted symlink: victim now %q, %v", b, err)
	}
	if fi, err := os.Lstat(doc); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("--results %s: %v, %v; want a regular file of mode 0644", doc, fi, err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("no --results document after the crash: %v", err)
	}
	var d struct {
		Results []struct {
			Rank  int             `json:"rank"`
			OK    bool            `json:"ok"`
			Value json.RawMessage `json:"value"`
		} `json:"results"`
		OK       bool `json:"ok"`
		ExitCode int  `json:"exit_code"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("--results document is not JSON: %v\n%s", err, b)
	}
	got := map[int]string{}
	for _, res := range d.Results {
		var v struct{ Rank int }
		if res.OK && json.Unmarshal(res.Value, &v) == nil {
			got[res.Rank] = strconv.Itoa(v.Rank)
		}
	}
	for rank := range 3 {
		if got[rank] != strconv.Itoa(rank) {
			t.Fatalf("rank %d's result lost (got %q); document:\n%s", rank, got[rank], b)
		}
	}
	if d.OK || d.ExitCode != 137 {
		t.Fatalf("document says ok=%v exit_code=%d, want false and 137:\n%s", d.OK, d.ExitCode, b)
	}
	assertNothingLeft(t, dir, 3)
}

// TestFaultResultsOutOfDisk: --results on a full file system (/dev/full's ENOSPC through a tiny tmpfs) fails the
// run with a message naming the file, never a half-written document, and leaves nothing running.
func TestFaultResultsOutOfDisk(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "tmpfs")
	mnt := t.TempDir()
	if err := syscall.Mount("tpurun-test", mnt, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatalf("mount a 4k tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mnt, "filler"), bytes.Repeat([]byte{'x'}, 4096), 0o644); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	dir := testutil.FakeDir(t)
	doc := filepath.Join(mnt, "results.json")
	r := runCLI(t, dir, []string{testutil.Fake("report")}, "--nprocs", "2", "--results", doc, "--", testutil.Program(t))
	wantStderr(t, r, 74, "results file "+doc, "no space left on device")
	if es, _ := os.ReadDir(mnt); len(es) != 1 {
		t.Fatalf("%d files in the full file system, want only the filler: a partial document or temp file was left", len(es))
	}
	assertNothingLeft(t, dir, 2)
}

// TestFaultMasterPortInUse: --master-port naming a port another process listens on is refused before anything
// starts (exit 2), naming the port and the holder's pid.
func TestFaultMasterPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dir := testutil.FakeDir(t)
	r := runCLI(t, dir, []string{testutil.Fake("exitready:0")}, "--nprocs", "2", "--master-port", strconv.Itoa(port), "--", testutil.Program(t))
	wantStderr(t, r, 2, fmt.Sprintf("MASTER_PORT=\"%d\"", port), "already in use", fmt.Sprintf("pid %d", os.Getpid()), "--master-port")
	if es, _ := os.ReadDir(filepath.Join(dir, "pids")); len(es) != 0 {
		t.Fatalf("%d workers started despite the busy MASTER_PORT", len(es))
	}
	l.Close()
	r = runCLI(t, dir, []string{testutil.Fake("exitready:0")}, "--nprocs", "2", "--master-port", strconv.Itoa(port), "--", testutil.Program(t))
	wantStderr(t, r, 0)
	assertNothingLeft(t, dir, 2)
}

// TestFaultLauncherSIGKILLWithGrandchildren: tpurun killed by SIGKILL; its workers die by Pdeathsig. Their
// grandchildren have no Pdeathsig tied to tpurun and nobody is left to sweep them: that is the documented limit of
// a SIGKILLed launcher (docs/FAULTS.md, "Known limit"). The test proves the workers die, and that the
// grandchildren survive, as documented: when a change closes the limit, this fails and the documentation changes
// with it.
func TestFaultLauncherSIGKILLWithGrandchildren(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("hang"), testutil.FakeRank(1, "grandkids:0")}, "--nprocs", "2", "--", testutil.Program(t))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitReady(t, dir, 2) // rank 1 is ready once both grandchildren recorded their pid
	gcs := map[int]bool{}
	es, _ := os.ReadDir(filepath.Join(dir, "gc"))
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join(dir, "gc", e.Name()))
		pid, _ := strconv.Atoi(string(b))
		gcs[pid] = true
	}
	if len(gcs) != 2 {
		t.Fatalf("%d grandchildren recorded, want 2", len(gcs))
	}
	t.Cleanup(func() {
		for pid := range gcs {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitExit(t, cmd)
	var workers []int
	for _, pid := range testutil.PIDs(t, dir) {
		if !gcs[pid] {
			workers = append(workers, pid)
			testutil.WaitGone(t, pid) // Pdeathsig
		}
	}
	if len(workers) != 2 {
		t.Fatalf("%d workers recorded their pid, want 2", len(workers))
	}
	// The workers are gone: whatever tpurun's death did to the grandchildren has been done by now.
	for pid := range gcs {
		if testutil.Dead(pid) {
			t.Errorf("grandchild pid %d died with the SIGKILLed tpurun: the known limit of docs/FAULTS.md is closed; "+
				"update its \"Known limit\" paragraph and this test", pid)
		}
	}
}

// TestFaultEveryForwardedSignal: each signal whose default action would kill a process, and that is not a stop
// signal (SIGABRT, SIGTRAP, SIGSYS, ...), is forwarded to every worker group; here each worker is a shell that
// has that default action and dies of it, which is the run's failure: 128+N; the grandchildren that ignore
// SIGTERM (one in its own session) are swept, and tpurun prints no goroutine dump (it dumped 285 lines and exited
// 2 before it caught them).
func TestFaultEveryForwardedSignal(t *testing.T) {
	t.Parallel()
	for _, s := range []syscall.Signal{syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGXCPU,
		syscall.SIGALRM, syscall.SIGPWR, syscall.SIGSEGV, syscall.SIGVTALRM, syscall.Signal(40)} {
		t.Run(failure.SignalName(s), func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			// each worker is sh, with every default action, around a fake worker that exits 0 (rank 1's once it
			// started two grandchildren that ignore SIGTERM)
			cmd, _, _ := tpurun(dir, []string{testutil.Fake("exit:0"), testutil.FakeRank(1, "grandkids:0")}, "--nprocs", "2", "--grace", "1s", "--",
				"/bin/sh", "-c", `"$0"; while :; do sleep 1; done`, testutil.Program(t))
			errb := &testutil.Buffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitReady(t, dir, 2) // rank 1 is ready once both grandchildren recorded their pid
			gcs := map[int]bool{}
			es, _ := os.ReadDir(filepath.Join(dir, "gc"))
			for _, e := range es {
				b, _ := os.ReadFile(filepath.Join(dir, "gc", e.Name()))
				pid, _ := strconv.Atoi(string(b))
				gcs[pid] = true
			}
			// the fake workers (Go: a forwarded SIGABRT would make them dump) have exited; only the shells run
			testutil.Eventually(t, "the fake workers exited", func() bool {
				for _, pid := range testutil.PIDs(t, dir) {
					if !gcs[pid] && syscall.Kill(pid, 0) == nil {
						return false
					}
				}
				return true
			})
			if err := cmd.Process.Signal(s); err != nil {
				t.Fatal(err)
			}
			testutil.WaitExit(t, cmd)
			if got := cmd.ProcessState.ExitCode(); got != 128+int(s) {
				t.Errorf("exit %d, want %d (the workers killed by the forwarded signal)\n%s", got, 128+int(s), errb.String())
			}
			if strings.Contains(errb.String(), "goroutine ") {
				t.Errorf("goroutine dump on stderr:\n%s", errb.String())
			}
			assertNothingLeft(t, dir, 2+2)
		})
	}
}

// TestFaultSignalStorm: 1000 SIGUSR1 and then one SIGTERM: the stop is never lost (coalesced delivery: the storm
// is one pending SIGUSR1, forwarded, and the SIGTERM behind it stops the run with 143).
func TestFaultSignalStorm(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("ignore:10")}, "--nprocs", "2", "--", testutil.Program(t))
	errb := &testutil.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitReady(t, dir, 2)
	for range 1000 {
		_ = cmd.Process.Signal(syscall.SIGUSR1)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitExit(t, cmd)                           // a lost SIGTERM leaves tpurun running: killed at the deadline, the test fails
	if got := cmd.ProcessState.ExitCode(); got != 143 { // the workers ignore SIGUSR1 and die of the SIGTERM
		t.Errorf("exit %d, want 143\n%s", got, errb.String())
	}
	if !strings.Contains(errb.String(), "forwarding signal") {
		t.Errorf("SIGUSR1 was never forwarded:\n%s", errb.String())
	}
	assertNothingLeft(t, dir, 2)
}
