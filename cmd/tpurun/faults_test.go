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
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"tpurun/launcher"
	"tpurun/launcher/launchertest"
	"unsafe"

	"tpurun/worker"
)

// init lets the test binary play the fault matrix's workers before TestMain runs. TPURUN_FAULT (or
// TPURUN_FAULT_<RANK>) is VERB[:ARG]; every fault worker records its pid under FAKE_DIR/pids first.
// TPURUN_FAULT_NOFILE=N makes the process a wrapper that sets RLIMIT_NOFILE (soft and hard) to N and execs its
// arguments, which is how a test runs tpurun under `ulimit -n N`.
func init() {
	if n := os.Getenv("TPURUN_FAULT_NOFILE"); n != "" {
		v, _ := strconv.ParseUint(n, 10, 64)
		lim := syscall.Rlimit{Cur: v, Max: v}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			os.Exit(96)
		}
		env := slicesWithout(os.Environ(), "TPURUN_FAULT_NOFILE=")
		err := syscall.Exec(os.Args[1], os.Args[1:], env)
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(96)
	}
	if path := os.Getenv("TPURUN_FAULT_RUSAGE"); path != "" {
		os.Exit(rusageWrapper(path))
	}
	verb, ok := os.LookupEnv("TPURUN_FAULT_" + os.Getenv("RANK"))
	if !ok {
		verb = os.Getenv("TPURUN_FAULT")
	}
	if verb == "" || os.Getenv("FAKE_DIR") == "" {
		return
	}
	os.Exit(faultWorker(verb))
}

// rusageWrapper runs its arguments as a child and writes the child's peak RSS in bytes (its own and its
// descendants', from wait4) to path. A process keeps the peak RSS of the image it was forked from, so measuring
// tpurun through this small wrapper keeps the size of the test binary that started it out of the figure.
func rusageWrapper(path string) int {
	c := exec.Command(os.Args[1], os.Args[2:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = slicesWithout(os.Environ(), "TPURUN_FAULT_RUSAGE=")
	_ = c.Run()
	if c.ProcessState == nil {
		return 96
	}
	rss := c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	_ = os.WriteFile(path, []byte(strconv.FormatInt(rss, 10)), 0o644)
	return c.ProcessState.ExitCode()
}

func slicesWithout(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

func faultWorker(behaviour string) int {
	dir, rank := os.Getenv("FAKE_DIR"), os.Getenv("RANK")
	_ = os.WriteFile(filepath.Join(dir, "pids", strconv.Itoa(os.Getpid())), nil, 0o644)
	verb, arg, _ := strings.Cut(behaviour, ":")
	n, _ := strconv.Atoi(arg)
	ready := func() { _ = os.WriteFile(filepath.Join(dir, "ready", rank), nil, 0o644) }
	allReady := func() {
		world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		for {
			if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) >= world {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	switch verb {
	case "exit": // exit n once every rank is ready
		ready()
		allReady()
		fmt.Printf("rank %s exits %d\n", rank, n)
		return n
	case "early": // exit n at once, while the launcher is still starting the others
		fmt.Fprintf(os.Stderr, "rank %s gives up during start-up\n", rank)
		return n
	case "raise": // die by signal n (SIGKILL, SIGSEGV) raised by the worker itself once every rank is ready
		ready()
		allReady()
		sig := syscall.Signal(n)
		// The Go runtime catches SIGSEGV; give it back its default action (terminate, core) like a C program has.
		var act [4]uintptr // struct kernel_sigaction: handler SIG_DFL (0), flags, restorer, mask
		// SIGKILL has no action to reset.
		if sig != syscall.SIGKILL {
			if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
				fmt.Fprintln(os.Stderr, "rt_sigaction:", e)
				return 95
			}
		}
		_ = syscall.Kill(os.Getpid(), sig)
		select {}
	case "hang":
		ready()
		select {}
	case "ignore": // ignore signal n (SIGTERM, SIGINT) and hang
		signal.Ignore(syscall.Signal(n))
		ready()
		select {}
	case "catch": // exit 0 on signal n
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.Signal(n))
		ready()
		<-c
		fmt.Printf("rank %s caught %s\n", rank, syscall.Signal(n))
		return 0
	case "grandkids": // start two grandchildren that ignore SIGTERM (one in its own session), then exit n
		for i, setsid := range []bool{false, true} {
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), "TPURUN_FAULT_"+rank+"=grandchild", fmt.Sprintf("GRANDCHILD=%d", i))
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "start grandchild:", err)
				return 94
			}
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if es, _ := os.ReadDir(filepath.Join(dir, "gc")); len(es) >= 2 || time.Now().After(deadline) {
				break
			}
		}
		ready()
		allReady()
		return n
	case "grandchild":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		_ = os.WriteFile(filepath.Join(dir, "gc", rank+"-"+os.Getenv("GRANDCHILD")), []byte(strconv.Itoa(os.Getpid())), 0o644)
		select {}
	case "closeout": // close stdout early, keep working, then exit 0
		fmt.Printf("rank %s closes stdout\n", rank)
		_ = os.Stdout.Close()
		ready()
		allReady()
		fmt.Fprintf(os.Stderr, "rank %s still alive after closing stdout\n", rank)
		return 0
	case "flood": // n lines of 64 bytes as fast as possible, then exit 0
		ready()
		line := []byte(strings.Repeat("x", 50) + " rank " + rank + " flood\n")
		var b bytes.Buffer
		for range n {
			b.Write(line)
		}
		_, _ = os.Stdout.Write(b.Bytes())
		fmt.Printf("rank %s flood done\n", rank)
		return 0
	case "errflood": // n lines to stderr, then hang (a stalled stderr reader holds it in its write); ignores SIGUSR1
		signal.Ignore(syscall.SIGUSR1)
		ready()
		for i := range n {
			fmt.Fprintf(os.Stderr, "rank %s err %d %s\n", rank, i, strings.Repeat("e", 100))
		}
		select {}
	case "long": // n lines of 10 000 bytes to stdout and to stderr, alternating, then exit 0
		ready()
		allReady()
		body := strings.Repeat("a", 10_000)
		for i := range n {
			fmt.Printf("rank %s out %d %s\n", rank, i, body)
			fmt.Fprintf(os.Stderr, "rank %s err %d %s\n", rank, i, body)
		}
		return 0
	case "fifoerr": // put a FIFO where TORCHELASTIC_ERROR_FILE goes (nobody will ever write it), then exit n
		path := os.Getenv("TORCHELASTIC_ERROR_FILE")
		_ = os.Remove(path)
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mkfifo:", err)
			return 92
		}
		return n
	case "linkerr": // make TORCHELASTIC_ERROR_FILE a symlink to a JSON file outside the log dir, then exit n
		path := os.Getenv("TORCHELASTIC_ERROR_FILE")
		target := filepath.Join(dir, "elsewhere.json")
		_ = os.WriteFile(target, []byte(`{"message": "read through a symlink"}`), 0o644)
		_ = os.Remove(path)
		if err := os.Symlink(target, path); err != nil {
			fmt.Fprintln(os.Stderr, "symlink:", err)
			return 92
		}
		return n
	case "escape": // leave the process group (join a helper's new group), ignore SIGTERM, hang; the helper too
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "TPURUN_FAULT_"+rank+"=ignore:15")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "start helper:", err)
			return 92
		}
		if err := syscall.Setpgid(0, c.Process.Pid); err != nil {
			fmt.Fprintln(os.Stderr, "setpgid:", err)
			return 92
		}
		_ = os.WriteFile(filepath.Join(dir, "gc", rank), nil, 0o644)
		ready()
		select {}
	case "late": // exit n 1.5 s after start
		ready()
		time.Sleep(1500 * time.Millisecond)
		return n
	case "dupflood", "foreignflood": // n result frames for its own replica (or for one it does not own), then exit 0
		r := replica()
		if verb == "foreignflood" {
			r = 999_999
		}
		return writeFrames(n, func(b []byte, i int) []byte {
			return appendFrame(b, worker.KindResult, r, []byte(strconv.Itoa(i)))
		})
	case "badthengood": // a result whose JSON is cut, one whose JSON holds invalid UTF-8, then the good result
		return writeFrames(1, func(b []byte, _ int) []byte {
			b = appendFrame(b, worker.KindResult, replica(), []byte(`{"cut": `))
			b = appendFrame(b, worker.KindResult, replica(), []byte("\"caf\xe9\""))
			return appendFrame(b, worker.KindResult, replica(), []byte(`{"rank": "`+rank+`"}`))
		})
	case "reportcrash": // report this rank's result, then die by SIGKILL once every rank is ready
		if err := worker.Report(replica(), map[string]string{"rank": rank}); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			return 93
		}
		ready()
		allReady()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "reporthang": // report this rank's result, then hang
		if err := worker.Report(replica(), map[string]string{"rank": rank}); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			return 93
		}
		ready()
		select {}
	case "report": // report this rank's result and exit 0
		if err := worker.Report(replica(), map[string]string{"rank": rank}); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			return 93
		}
		return 0
	}
	return 98
}

// appendFrame appends one JSON frame, written as is (no client-side checks: these are what a broken worker sends).
func appendFrame(b []byte, k worker.Kind, replica int, payload []byte) []byte {
	b = worker.AppendHeader(b, k, worker.EncodingJSON, replica, len(payload))
	return append(b, payload...)
}

// writeFrames writes n frames made by add straight to the result channel, in large writes.
func writeFrames(n int, add func(b []byte, i int) []byte) int {
	fd, err := strconv.Atoi(os.Getenv(worker.EnvResultFD))
	if err != nil {
		fmt.Fprintln(os.Stderr, "no result channel:", err)
		return 91
	}
	ch := os.NewFile(uintptr(fd), "results")
	var b []byte
	for i := range n {
		b = add(b, i)
		if len(b) >= 1<<20 || i == n-1 {
			if _, err := ch.Write(b); err != nil {
				fmt.Fprintln(os.Stderr, "write frames:", err)
				return 91
			}
			b = b[:0]
		}
	}
	return 0
}

// replica is the first replica this worker owns (TPURUN_REPLICAS "1" or "2,3").
func replica() int {
	first, _, _ := strings.Cut(os.Getenv("TPURUN_REPLICAS"), ",")
	n, _ := strconv.Atoi(first)
	return n
}

// faultDir is fakeDir plus the grandchildren's directory.
func faultDir(t *testing.T) string {
	t.Helper()
	d := launchertest.FakeDir(t)
	if err := os.Mkdir(filepath.Join(d, "gc"), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// assertNothingLeft proves that no process of the run survives: every recorded pid is gone (assertAllGone) and
// no live process on the machine carries FAKE_DIR=dir in its environment (this catches workers that were killed
// before they could record their pid, and grandchildren).
func assertNothingLeft(t *testing.T, dir string, recorded int, within time.Duration) {
	t.Helper()
	launchertest.AssertAllGone(t, dir, recorded, within)
	needle := []byte("FAKE_DIR=" + dir + "\x00")
	deadline := time.Now().Add(within)
	for {
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
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the run still alive %s after tpurun exited: %v", within, left)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		{"exit-1", 3, "exit:1", nil, 1, []string{"rank 1", "exit 1"}, 3},
		{"exit-255", 3, "exit:255", nil, 255, []string{"rank 1", "exit 255"}, 3},
		{"sigkill", 3, "raise:9", nil, 137, []string{"rank 1", "SIGKILL"}, 3},
		{"sigsegv", 3, "raise:11", nil, 139, []string{"rank 1", "SIGSEGV"}, 3},
		{"timeout", 2, "hang", []string{"--timeout", "1s"}, 124, []string{"timeout 1s expired"}, 2},
		{"ignores-sigterm", 3, "exit:3", []string{"--grace", "500ms"}, 3, []string{"rank 1", "grace 500ms expired: SIGKILL to every worker group"}, 3},
		{"exits-during-start-up", 16, "early:4", nil, 4, []string{"rank 1", "exit 4"}, 15},
		{"grandchildren-ignore-sigterm", 3, "grandkids:7", []string{"--grace", "500ms"}, 7, []string{"rank 1", "exit 7"}, 3 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := faultDir(t)
			others := "hang"
			if tc.name == "ignores-sigterm" {
				others = "ignore:15"
			}
			env := []string{"TPURUN_FAULT=" + others, "TPURUN_FAULT_1=" + tc.fault}
			args := append(append([]string{"--nprocs", strconv.Itoa(tc.nprocs)}, tc.args...), "--", os.Args[0])
			start := time.Now()
			r := runCLI(t, dir, env, args...)
			wantStderr(t, r, tc.code, tc.fragments...)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %s", d)
			}
			if tc.name == "exits-during-start-up" {
				// rank 1 never records its pid: count only what was recorded, the /proc scan covers the rest.
				es, _ := os.ReadDir(filepath.Join(dir, "pids"))
				tc.recorded = len(es)
			}
			assertNothingLeft(t, dir, tc.recorded, 5*time.Second)
		})
	}
}

// TestFaultWorkerOutput: a worker that closes its stdout early or floods it neither hangs nor fails the run, and
// every line it wrote arrives whole.
func TestFaultWorkerOutput(t *testing.T) {
	t.Parallel()
	t.Run("closes-stdout-early", func(t *testing.T) {
		t.Parallel()
		dir := faultDir(t)
		r := runCLI(t, dir, []string{"TPURUN_FAULT=closeout"}, "--nprocs", "2", "--", os.Args[0])
		wantStderr(t, r, 0, "[0] rank 0 still alive after closing stdout", "[1] rank 1 still alive after closing stdout")
		if !strings.Contains(r.stdout, "[1] rank 1 closes stdout") {
			t.Fatalf("stdout lacks the line written before closing:\n%s", r.stdout)
		}
		assertNothingLeft(t, dir, 2, 5*time.Second)
	})
	t.Run("floods-stdout", func(t *testing.T) {
		t.Parallel()
		dir := faultDir(t)
		const lines = 100_000
		start := time.Now()
		r := runCLI(t, dir, []string{"TPURUN_FAULT=flood:" + strconv.Itoa(lines)}, "--nprocs", "2", "--", os.Args[0])
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
		assertNothingLeft(t, dir, 2, 5*time.Second)
	})
}

// TestFaultLauncherSignals: signals to tpurun itself.
func TestFaultLauncherSignals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   string
		sigs    []syscall.Signal
		args    []string
		code    int
		within  time.Duration // tpurun must be gone this soon after the last signal
		stdouts int           // "caught" lines expected
	}{
		{"sigint-once", "hang", []syscall.Signal{syscall.SIGINT}, nil, 130, 10 * time.Second, 0},
		// a stop by signal N exits 128+N also when the workers then exit 0: a preempted job does not look successful
		{"sigint-once-workers-exit-0", "catch:2", []syscall.Signal{syscall.SIGINT}, nil, 130, 10 * time.Second, 2},
		{"sigint-twice", "ignore:2", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, []string{"--grace", "60s"}, 130, 5 * time.Second, 0},
		{"sigterm-twice", "ignore:15", []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, []string{"--grace", "60s"}, 143, 5 * time.Second, 0},
		// SIGHUP is forwarded, not a stop: the workers die of it, the first failure's code
		{"sighup", "hang", []syscall.Signal{syscall.SIGHUP}, nil, 129, 10 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := faultDir(t)
			args := append(append([]string{"--nprocs", "2"}, tc.args...), "--", os.Args[0])
			cmd, out, _ := tpurun(dir, []string{"TPURUN_FAULT=" + tc.fault}, args...)
			errb := &syncBuffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			launchertest.WaitReady(t, dir, 2)
			for i, s := range tc.sigs {
				if i > 0 { // the second signal must find tpurun already stopping
					waitFor(t, errb, "stopping all workers")
				}
				if err := cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			sent := time.Now()
			_ = cmd.Wait()
			if d := time.Since(sent); d > tc.within {
				t.Fatalf("tpurun took %s after the last signal, want < %s", d, tc.within)
			}
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d\n%s", got, tc.code, errb.String())
			}
			if got := strings.Count(out.String(), "caught"); got != tc.stdouts {
				t.Fatalf("%d workers caught the signal, want %d:\n%s", got, tc.stdouts, out.String())
			}
			assertNothingLeft(t, dir, 2, 5*time.Second)
		})
	}
}

// syncBuffer is a bytes.Buffer that a test may read while tpurun's output is being copied into it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls b (written by a running tpurun) until it contains s.
func waitFor(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(b.String(), s); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tpurun never logged %q:\n%s", s, b.String())
		}
	}
}

// TestFaultFDLimit: tpurun under `ulimit -n 40` asked for 64 workers fails with exit 70 naming RLIMIT_NOFILE and
// its value, and leaves none of the workers it did start running.
func TestFaultFDLimit(t *testing.T) {
	t.Parallel()
	dir := faultDir(t)
	cmd := exec.Command(os.Args[0], filepath.Join(bin, "tpurun"), "--nprocs", "64", "--", os.Args[0])
	cmd.Env = append(os.Environ(), "FAKE_DIR="+dir, "TPURUN_FAULT=hang", "TPURUN_FAULT_NOFILE=40")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	r := result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
	wantStderr(t, r, 70, "RLIMIT_NOFILE is 40", "raise ulimit -n")
	es, _ := os.ReadDir(filepath.Join(dir, "pids"))
	assertNothingLeft(t, dir, len(es), 5*time.Second)
}

// TestFaultLogDirSymlink: a symlink planted where a log file goes is never followed. The run's directory is new
// (<run-id>_<random>), so the planter is a worker of attempt 0: it puts DIR/<run>_<random>/attempt_1/0/stdout.log
// -> victim there and fails; the restart refuses with exit 2 naming the link, the victim is untouched.
func TestFaultLogDirSymlink(t *testing.T) {
	t.Parallel()
	dir := faultDir(t)
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
	r = runCLI(t, dir, []string{"TPURUN_FAULT=exit:0"}, "--nprocs", "2", "--log-dir", logs, "--run-id", "planted", "--", os.Args[0])
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
	assertNothingLeft(t, dir, 2, 5*time.Second)
}

// TestFaultLogDirOutOfDisk: --log-dir on a full file system (a 64 KiB tmpfs) does not fail or hang the run: tpurun
// warns naming the file and the error, the console still gets every line, the log files hold what fit, nothing is
// left running.
func TestFaultLogDirOutOfDisk(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	if err := syscall.Mount("tpurun-test", logs, "tmpfs", 0, "size=64k"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a 64k tmpfs on %s: %v (CI must run this as root)", logs, err)
		}
		t.Skipf("SKIPPED, NOT PASSED: cannot mount a tmpfs (%v); run as root to test out-of-disk --log-dir", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(logs, syscall.MNT_DETACH) })
	dir := faultDir(t)
	const lines = 20_000 // 2 x 1.2 MB of output for 64 KiB of disk
	r := runCLI(t, dir, []string{"TPURUN_FAULT=flood:" + strconv.Itoa(lines)}, "--nprocs", "2", "--log-dir", logs,
		"--tee", "3", "--", os.Args[0])
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
	assertNothingLeft(t, dir, 2, 5*time.Second)
}

// TestFaultSecretsNotLogged: a secret in tpurun's environment never appears in its own logs (debug, json), nor in
// the exit summary.
func TestFaultSecretsNotLogged(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-v4lue-never-logged"
	env := []string{"TPURUN_FAULT=exit:3", "HF_TOKEN=" + secret, "MY_API_KEY=" + secret, "DB_PASSWORD=" + secret, "AWS_SECRET_ACCESS_KEY=" + secret}
	for _, format := range []string{"console", "json"} {
		dir := faultDir(t)
		r := runCLI(t, dir, env, "-v", "--log-format", format, "--nprocs", "2", "--", os.Args[0])
		wantStderr(t, r, 3, "rank")
		if strings.Contains(r.stderr, secret) || strings.Contains(r.stdout, secret) {
			t.Fatalf("--log-format %s: the secret value appears in tpurun's output:\n%s\n%s", format, r.stderr, r.stdout)
		}
		assertNothingLeft(t, dir, 2, 5*time.Second)
	}
}

// TestFaultReportThenCrash: results that arrived before a worker crashed are kept in the --results document, the
// crashed rank's own result included, and the run still exits with the crash's code. The document replaces a
// symlink planted at its path (atomic rename) instead of writing through it, and has mode 0644.
func TestFaultReportThenCrash(t *testing.T) {
	t.Parallel()
	dir := faultDir(t)
	doc := filepath.Join(t.TempDir(), "results.json")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, doc); err != nil { // planted: must be replaced, never written through
		t.Fatal(err)
	}
	r := runCLI(t, dir, []string{"TPURUN_FAULT=reporthang", "TPURUN_FAULT_1=reportcrash"},
		"--nprocs", "3", "--results", doc, "--", os.Args[0])
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
		var v map[string]string
		if res.OK && json.Unmarshal(res.Value, &v) == nil {
			got[res.Rank] = v["rank"]
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
	assertNothingLeft(t, dir, 3, 5*time.Second)
}

// TestFaultResultsOutOfDisk: --results on a full file system (/dev/full's ENOSPC through a tiny tmpfs) fails the
// run with a message naming the file, never a half-written document, and leaves nothing running.
func TestFaultResultsOutOfDisk(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := syscall.Mount("tpurun-test", mnt, "tmpfs", 0, "size=4k"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a 4k tmpfs on %s: %v (CI must run this as root)", mnt, err)
		}
		t.Skipf("SKIPPED, NOT PASSED: cannot mount a tmpfs (%v); run as root to test out-of-disk --results", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mnt, "filler"), bytes.Repeat([]byte{'x'}, 4096), 0o644); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	dir := faultDir(t)
	doc := filepath.Join(mnt, "results.json")
	r := runCLI(t, dir, []string{"TPURUN_FAULT=report"}, "--nprocs", "2", "--results", doc, "--", os.Args[0])
	wantStderr(t, r, 74, "results file "+doc, "no space left on device")
	if es, _ := os.ReadDir(mnt); len(es) != 1 {
		t.Fatalf("%d files in the full file system, want only the filler: a partial document or temp file was left", len(es))
	}
	assertNothingLeft(t, dir, 2, 5*time.Second)
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
	dir := faultDir(t)
	r := runCLI(t, dir, []string{"TPURUN_FAULT=exit:0"}, "--nprocs", "2", "--master-port", strconv.Itoa(port), "--", os.Args[0])
	wantStderr(t, r, 2, fmt.Sprintf("MASTER_PORT=\"%d\"", port), "already in use", fmt.Sprintf("pid %d", os.Getpid()), "--master-port")
	if es, _ := os.ReadDir(filepath.Join(dir, "pids")); len(es) != 0 {
		t.Fatalf("%d workers started despite the busy MASTER_PORT", len(es))
	}
	l.Close()
	r = runCLI(t, dir, []string{"TPURUN_FAULT=exit:0"}, "--nprocs", "2", "--master-port", strconv.Itoa(port), "--", os.Args[0])
	wantStderr(t, r, 0)
	assertNothingLeft(t, dir, 2, 5*time.Second)
}

// TestFaultLauncherSIGKILLWithGrandchildren: tpurun killed by SIGKILL; its workers die by Pdeathsig. Their
// grandchildren have no Pdeathsig tied to tpurun and nobody is left to sweep them: that is the documented limit of
// a SIGKILLed launcher (docs/FAULTS.md). The test proves the workers die and records what the grandchildren do.
func TestFaultLauncherSIGKILLWithGrandchildren(t *testing.T) {
	t.Parallel()
	dir := faultDir(t)
	cmd, _, _ := tpurun(dir, []string{"TPURUN_FAULT=hang", "TPURUN_FAULT_1=grandkids:0"}, "--nprocs", "2", "--", os.Args[0])
	cmd.Env = append(cmd.Env, "TPURUN_FAULT_1=grandkids:0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	launchertest.WaitReady(t, dir, 2)
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
	_ = cmd.Wait()
	ps, _ := os.ReadDir(filepath.Join(dir, "pids"))
	deadline := time.Now().Add(3 * time.Second)
	for _, e := range ps {
		pid, _ := strconv.Atoi(e.Name())
		if gcs[pid] {
			continue
		}
		for {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker pid %d survived tpurun's SIGKILL (Pdeathsig)", pid)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for pid := range gcs {
		t.Logf("grandchild pid %d after tpurun's SIGKILL: kill(0) = %v (known limit: nothing sweeps it)", pid, syscall.Kill(pid, 0))
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
		t.Run(launcher.SignalName(s), func(t *testing.T) {
			t.Parallel()
			dir := faultDir(t)
			// each worker is sh, with every default action, around a fault worker that exits 0 (rank 1's once it
			// started two grandchildren that ignore SIGTERM)
			cmd, _, _ := tpurun(dir, []string{"TPURUN_FAULT=exit:0", "TPURUN_FAULT_1=grandkids:0"}, "--nprocs", "2", "--grace", "1s", "--",
				"/bin/sh", "-c", `"$0"; while :; do sleep 1; done`, os.Args[0])
			errb := &syncBuffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			launchertest.WaitReady(t, dir, 2)
			gcs := map[int]bool{}
			launchertest.Eventually(t, 10*time.Second, func() bool {
				es, _ := os.ReadDir(filepath.Join(dir, "gc"))
				for _, e := range es {
					b, _ := os.ReadFile(filepath.Join(dir, "gc", e.Name()))
					pid, _ := strconv.Atoi(string(b))
					gcs[pid] = true
				}
				return len(es) >= 2
			}, "two grandchildren started")
			// the fault workers (Go: a forwarded SIGABRT would make them dump) have exited; only the shells run
			launchertest.Eventually(t, 10*time.Second, func() bool {
				for _, pid := range launchertest.PIDs(t, dir) {
					if !gcs[pid] && syscall.Kill(pid, 0) == nil {
						return false
					}
				}
				return true
			}, "the fault workers exited")
			if err := cmd.Process.Signal(s); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != 128+int(s) {
				t.Errorf("exit %d, want %d (the workers killed by the forwarded signal)\n%s", got, 128+int(s), errb.String())
			}
			if strings.Contains(errb.String(), "goroutine ") {
				t.Errorf("goroutine dump on stderr:\n%s", errb.String())
			}
			assertNothingLeft(t, dir, 2+2, 5*time.Second)
		})
	}
}

// TestFaultSignalStorm: 1000 SIGUSR1 and then one SIGTERM: the stop is never lost (coalesced delivery: the storm
// is one pending SIGUSR1, forwarded, and the SIGTERM behind it stops the run with 143).
func TestFaultSignalStorm(t *testing.T) {
	t.Parallel()
	dir := faultDir(t)
	cmd, _, _ := tpurun(dir, []string{"TPURUN_FAULT=ignore:10"}, "--nprocs", "2", "--", os.Args[0])
	errb := &syncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	launchertest.WaitReady(t, dir, 2)
	for range 1000 {
		_ = cmd.Process.Signal(syscall.SIGUSR1)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the SIGTERM after 1000 SIGUSR1 was lost: tpurun still running\n%s", errb.String())
	}
	if got := cmd.ProcessState.ExitCode(); got != 143 { // the workers ignore SIGUSR1 and die of the SIGTERM
		t.Errorf("exit %d, want 143\n%s", got, errb.String())
	}
	if !strings.Contains(errb.String(), "forwarding signal") {
		t.Errorf("SIGUSR1 was never forwarded:\n%s", errb.String())
	}
	assertNothingLeft(t, dir, 2, 5*time.Second)
}
