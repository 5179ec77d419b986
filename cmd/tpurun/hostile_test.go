package main

// Hostile conditions for the control path (docs/FAULTS.md, "Output and control"): a stderr nobody reads, files a
// worker replaces with a FIFO or a symlink, a worker that leaves its process group. Control (timeouts, failures,
// signals, teardown) never waits for a reader or a file.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"tpurun/internal/testutil"
)

// stalled is a tpurun whose stderr is a pipe nobody reads until unstall.
type stalled struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	errR   *os.File
}

func startStalled(t *testing.T, dir string, env []string, args ...string) *stalled {
	t.Helper()
	cmd, out, _ := tpurun(dir, env, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	s := &stalled{cmd: cmd, stdout: out, errR: pr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		pr.Close()
	})
	return s
}

// unstall reads stderr to EOF and returns it with tpurun's exit code.
func (s *stalled) unstall(t *testing.T) (int, string) {
	t.Helper()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(s.errR)
		done <- b
	}()
	code := testutil.WaitExit(t, s.cmd)
	return code, string(<-done)
}

// waitStalled waits until the stall has had its whole effect on tpurun: it is blocked writing to its stderr, or it
// has exited (a zombie, until unstall reaps it) without needing the reader.
func (s *stalled) waitStalled(t *testing.T) {
	t.Helper()
	pid := s.cmd.Process.Pid
	testutil.Eventually(t, fmt.Sprintf("tpurun (pid %d) blocked writing its stalled stderr, or gone", pid), func() bool {
		return testutil.BlockedWriting(pid, 2) || testutil.Dead(pid)
	})
}

// waitWorkersBlocked waits until every errflood worker of the run (all but the ranks in except) wrote all it can:
// it is blocked writing its stderr, or it wrote every line (tpurun's queue took them all); and together they wrote
// more than tpurun's console queues (1 MiB), so the stall reached them: a worker blocked a moment on a pipe that
// tpurun's forwarder had not read yet (a loaded machine) is not enough (seen: SIGTERM then, 2 911 lines).
func waitWorkersBlocked(t *testing.T, dir string, n int, except ...string) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d workers blocked writing their stderr, or done, past tpurun's queue", n-len(except)), func() error {
		blocked, total := 0, int64(0)
		for _, pid := range testutil.PIDs(t, dir) {
			rank := envOf(pid, "RANK")
			if slices.Contains(except, rank) {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, "flooded-"+rank)); err != nil && !testutil.BlockedWriting(pid, 2) {
				return fmt.Errorf("pid %d (rank %s, state %s) is not: %s", pid, envOf(pid, "RANK"), testutil.ProcState(pid), testutil.Syscalls(pid))
			}
			blocked++
			total += written(pid)
		}
		if blocked < n-len(except) {
			return fmt.Errorf("%d are", blocked)
		}
		if total <= 1<<20 {
			return fmt.Errorf("they are, but wrote %d bytes: no more than tpurun's queue holds", total)
		}
		return nil
	})
}

// written is how many bytes pid has written (wchar in /proc/PID/io), 0 when unreadable.
func written(pid int) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// envOf is the value of key in the environment of process pid ("" when unreadable).
func envOf(pid int, key string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k == key {
			return v
		}
	}
	return ""
}

// TestHostileStalledStderr: with stderr stalled (a pager that does not read, 2 MB of worker output queued behind
// it, every worker blocked in write), a timeout, a failing rank, a SIGTERM and a SIGTERM behind 40 SIGUSR1 each
// take effect at once: every worker is gone while stderr is still unread, and once it is read tpurun exits with the
// right code and every line it shows is whole. They waited for the reader, and the SIGTERM behind the storm was
// lost.
func TestHostileStalledStderr(t *testing.T) {
	t.Parallel()
	timeout := testutil.Scaled(5 * time.Second)
	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		signal func(p *os.Process)
		code   int
		says   string
	}{
		// the timeout comes once the workers are blocked writing (it waits for that): long enough on a loaded machine
		{"timeout", nil, []string{"--timeout", timeout.String()}, nil, 124, "timeout " + timeout.String() + " expired"},
		{"failing-rank", []string{testutil.FakeRank(2, "exitongo:3")}, nil, nil, 3, "exit 3"}, // rank 2 fails on Go
		{"sigterm", nil, nil, func(p *os.Process) { _ = p.Signal(syscall.SIGTERM) }, 143, "SIGTERM"},
		{"sigterm-behind-40-sigusr1", nil, nil, func(p *os.Process) {
			for range 40 {
				_ = p.Signal(syscall.SIGUSR1)
			}
			_ = p.Signal(syscall.SIGTERM)
		}, 143, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			env := append([]string{testutil.Fake("errflood:9000")}, tc.env...)
			nprocs := 2 + len(tc.env) // a failing rank is a third one
			s := startStalled(t, dir, env, append(append([]string{"--nprocs", strconv.Itoa(nprocs)}, tc.args...), "--", testutil.Program(t))...)
			testutil.WaitReady(t, dir, nprocs)
			var except []string
			if len(tc.env) > 0 {
				except = []string{"2"} // the failing rank waits for Go, it does not write
			}
			waitWorkersBlocked(t, dir, nprocs, except...)
			switch {
			case tc.signal != nil:
				tc.signal(s.cmd.Process)
			case len(tc.env) > 0:
				testutil.Go(t, dir)
			}
			// Every worker is dead while nobody reads stderr: the control path did not wait for the console. (tpurun
			// reaps them once their output is written: until then they are zombies, their pids reserved.)
			assertAllDead(t, dir, nprocs)
			code, stderr := s.unstall(t)
			if code != tc.code || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d, want %d with %q; stderr tail:\n%s", code, tc.code, tc.says, tail(stderr, 2000))
			}
			errLine := strings.Repeat("e", 100)
			n := 0
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, " err ") && strings.Contains(l, "rank ") {
					n++
					if !strings.HasSuffix(l, errLine) {
						t.Fatalf("a worker line arrived cut: %q", l)
					}
				}
			}
			if n < 5000 { // more than the pipes and the console's queue hold: the workers wrote while stalled
				t.Fatalf("only %d worker lines on stderr", n)
			}
			assertNothingLeft(t, dir, nprocs)
		})
	}
}

// TestHostileSecondSignalDuringStalledDrain: after a SIGTERM the workers are gone but tpurun still holds output
// for a stderr nobody reads; a second SIGTERM ends tpurun at once (143) instead of waiting for the reader.
func TestHostileSecondSignalDuringStalledDrain(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"right-behind-the-first", "after-the-workers-died"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			s := startStalled(t, dir, []string{testutil.Fake("errflood:9000")}, "--nprocs", "2", "--", testutil.Program(t))
			testutil.WaitReady(t, dir, 2)
			waitWorkersBlocked(t, dir, 2)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			// Two SIGTERMs that arrive before tpurun handled the first are one (the kernel and the Go runtime
			// coalesce a pending signal): the second is sent once tpurun acted on the first, as soon as a
			// worker died of it (right behind), or once every worker is dead and tpurun is stuck draining their
			// output into the stalled stderr.
			if when == "after-the-workers-died" {
				assertAllDead(t, dir, 2)
				s.waitStalled(t)
			} else {
				testutil.WaitFor(t, "a worker to die of the forwarded SIGTERM", func() error {
					for _, p := range testutil.PIDs(t, dir) {
						if testutil.Dead(p) {
							return nil
						}
					}
					return errors.New("none yet")
				})
			}
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			// Nobody reads stderr: a tpurun that waits for the reader is killed at the deadline and fails here.
			if code := testutil.WaitExit(t, s.cmd); code != 143 {
				t.Fatalf("exit %d, want 143", code)
			}
			assertNothingLeft(t, dir, 2)
		})
	}
}

// TestHostileErrorFile: a worker that replaces its TORCHELASTIC_ERROR_FILE with a FIFO no one writes (tpurun hung
// forever on opening it, deaf to SIGTERM) or with a symlink to a file elsewhere: tpurun reads neither, says what it
// found, and exits with the worker's code.
func TestHostileErrorFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fault, says string
		logDir            bool
	}{
		{"fifo", "fifoerr:5", "is a named pipe (FIFO), not a regular file", false},
		{"fifo-in-log-dir", "fifoerr:5", "is a named pipe (FIFO), not a regular file", true},
		{"symlink", "linkerr:5", "is a symlink, not a regular file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			args := []string{"--nprocs", "1"}
			if tc.logDir {
				args = append(args, "--log-dir", filepath.Join(dir, "logs"))
			}
			cmd, _, errb := tpurun(dir, []string{testutil.Fake(tc.fault)}, append(args, "--", testutil.Program(t))...)
			code := testutil.WaitExit(t, cmd) // a tpurun hung on the error file is killed and fails here
			if code != 5 || !strings.Contains(errb.String(), tc.says) || strings.Contains(errb.String(), "read through a symlink") {
				t.Fatalf("exit %d, want 5, saying %q and not showing the symlink's target:\n%s", code, tc.says, errb)
			}
		})
	}
}

// TestHostileEscapedWorker: workers that leave their process group (setsid) and ignore SIGTERM are still found by
// the subtree sweep and killed when --timeout expires; tpurun exits 124 and nothing survives. They were never
// killed, and --timeout waited for them forever.
func TestHostileEscapedWorker(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	r := runCLI(t, dir, []string{testutil.Fake("leavegroup")}, "--nprocs", "2", "--timeout", upTimeout, "--grace", "500ms", "--", testutil.Program(t))
	if es, _ := os.ReadDir(filepath.Join(dir, "gc")); len(es) != 2 {
		t.Fatalf("%d workers left their process group, want 2:\n%s", len(es), r.stderr)
	}
	wantStderr(t, r, 124, "timeout "+upTimeout+" expired") // runCLI fails at the deadline if --timeout waited for them
	assertNothingLeft(t, dir, 4)
}

// assertAllDead waits until at least want fakes recorded their pid, and every one of them has exited: gone, or a
// zombie.
func assertAllDead(t *testing.T, dir string, want int) {
	t.Helper()
	var ps []int
	testutil.WaitFor(t, fmt.Sprintf("%d fake processes to record their pid", want), func() error {
		if ps = testutil.PIDs(t, dir); len(ps) < want {
			return fmt.Errorf("%d did", len(ps))
		}
		return nil
	})
	for _, pid := range ps {
		testutil.WaitDead(t, pid)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestHostilePidReuse: rank 1 exits early while rank 0 runs on; an unrelated process then takes rank 1's pid as
// its own process group (forced through /proc/sys/kernel/ns_last_pid) and a SIGTERM tears the run down. tpurun
// signalled the -pgid of every worker at teardown, exited ones too, and so killed the stranger. Now the exited
// worker stays an unreaped zombie until its teardown is done, so its pid cannot be taken at all, and the
// stranger survives.
func TestHostilePidReuse(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	lastPID := testutil.Need(t, "ns_last_pid")
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("hang"), testutil.FakeRank(1, "exitready:0")}, "-v", "--nprocs", "2", "--", testutil.Program(t))
	errb := &testutil.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testutil.WaitReady(t, dir, 2)
	// tpurun has handled rank 1's exit once it logs it (-v): a tpurun that reaps an exited worker has reaped it
	// by then, and its pid is free for the stranger below.
	errb.WaitFor(t, "worker exited")
	target := 0
	for _, pid := range testutil.PIDs(t, dir) {
		if testutil.Dead(pid) {
			target = pid
		}
	}
	if target == 0 {
		t.Fatalf("tpurun logged a worker's exit, but no recorded pid is dead:\n%s", errb)
	}
	var strangers []*exec.Cmd
	t.Cleanup(func() {
		for _, s := range strangers {
			_ = s.Process.Kill()
			_ = s.Wait()
		}
	})
	claimed := false
	for range 50 {
		if err := os.WriteFile(lastPID, []byte(strconv.Itoa(target-1)), 0); err != nil {
			t.Fatal(err)
		}
		s := exec.Command("sleep", "60")
		s.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, s)
		if s.Process.Pid == target {
			claimed = true
			break
		}
	}
	if !claimed { // the pid is still held: the exited worker must be tpurun's unreaped zombie
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(target) + "/stat")
		if !bytes.Contains(b, []byte(") Z ")) {
			t.Fatalf("pid %d was neither reusable nor a zombie: %q", target, b)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	testutil.WaitExit(t, cmd)
	for _, s := range strangers {
		if testutil.Dead(s.Process.Pid) {
			t.Fatalf("tpurun killed pid %d, a stranger that took an exited worker's pid (claimed %v):\n%s", s.Process.Pid, claimed, errb)
		}
	}
	assertNothingLeft(t, dir, 2)
}

// resultsDoc is the part of the results document these tests read.
type resultsDoc struct {
	Results []struct {
		Replica int             `json:"replica"`
		Rank    int             `json:"rank"`
		Value   json.RawMessage `json:"value"`
	} `json:"results"`
	Violations []struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"violations"`
	ExitCode int `json:"exit_code"`
}

// TestHostileResultFloods: one million duplicate result frames, or 200 000 frames for a replica the worker does
// not own, keep tpurun's memory, its stderr and the results document small (they gave ~550 MiB, an 18 MB stderr
// line, 136 MiB of stderr and an 82 MiB document): the first result is kept, the rest counted, one log line per
// kind of violation.
func TestHostileResultFloods(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault, kind, says string
	}{
		{"dupflood:1000000", "duplicate_result", "1000000 results for replica 0: rank 0 pid "},
		{"foreignflood:200000", "foreign_replica", "199997 more foreign_replica violations"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			testutil.Heavy(t) // a flood and a memory figure
			dir := testutil.FakeDir(t)
			doc := filepath.Join(dir, "results.json")
			cmd, _, errb := tpurun(dir, []string{testutil.Fake(tc.fault)}, "--nprocs", "1", "--results", doc, "--", testutil.Program(t))
			// Through the rusage wrapper, a child whose only job is the measurement: the peak RSS of tpurun and
			// its worker, without this test binary's.
			rssFile := filepath.Join(dir, "rss")
			cmd.Path, cmd.Args = os.Args[0], append([]string{os.Args[0]}, cmd.Args...)
			cmd.Env = append(cmd.Env, testutil.Self("rusage:"+rssFile))
			testutil.WaitExit(t, cmd)
			rb, _ := os.ReadFile(rssFile)
			rss, perr := strconv.ParseInt(string(rb), 10, 64)
			if perr != nil {
				t.Fatalf("no peak RSS measured (%v):\n%s", perr, errb)
			}
			b, rerr := os.ReadFile(doc)
			if rerr != nil {
				t.Fatal(rerr)
			}
			var d resultsDoc
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("results document unreadable: %v", err)
			}
			t.Logf("%s: exit %d, peak RSS %d MiB, stderr %d bytes, document %d bytes, %d violations listed",
				tc.fault, cmd.ProcessState.ExitCode(), rss>>20, errb.Len(), len(b), len(d.Violations))
			if cmd.ProcessState.ExitCode() != 65 || d.ExitCode != 65 {
				t.Fatalf("exit %d (document %d), want 65:\n%s", cmd.ProcessState.ExitCode(), d.ExitCode, tail(errb.String(), 4000))
			}
			if rss > 200<<20 || errb.Len() > 64<<10 || len(b) > 64<<10 {
				t.Fatalf("not bounded: peak RSS %d MiB, stderr %d bytes, document %d bytes", rss>>20, errb.Len(), len(b))
			}
			if strings.Count(errb.String(), "result contract violated") > 1 {
				t.Fatalf("want at most one log line for the kind:\n%s", tail(errb.String(), 4000))
			}
			found := false
			for _, v := range d.Violations {
				found = found || (v.Kind == tc.kind && strings.Contains(v.Message, tc.says))
			}
			if !found {
				t.Fatalf("no %s violation saying %q: %+v", tc.kind, tc.says, d.Violations)
			}
			if tc.kind == "duplicate_result" && (len(d.Results) != 1 || string(d.Results[0].Value) != "0") {
				t.Fatalf("want the first result (0) kept: %+v", d.Results)
			}
		})
	}
}

// TestHostileMalformedThenGood: with stderr stalled for 3 s, a worker sends a result whose JSON is cut, one whose
// JSON string holds invalid UTF-8, then its good result: both bad ones are malformed_frame violations, the good one
// is kept (it was lost, reported missing), and the document is valid JSON for Python's json.load.
func TestHostileMalformedThenGood(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	doc := filepath.Join(dir, "results.json")
	s := startStalled(t, dir, []string{testutil.Fake("badthengood")}, "--nprocs", "2", "--expect-results", "--results", doc, "--", testutil.Program(t))
	// Both workers wrote their frames and exited; then tpurun did all it could without a reader of its stderr.
	assertAllDead(t, dir, 2)
	s.waitStalled(t)
	code, stderr := s.unstall(t)
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var d resultsDoc
	if err := json.Unmarshal(b, &d); err != nil || !utf8.Valid(b) {
		t.Fatalf("results document unreadable (%v):\n%s", err, b)
	}
	if code != 65 || len(d.Results) != 2 {
		t.Fatalf("exit %d, %d results; want 65 and both good results kept:\n%s\n%s", code, len(d.Results), b, tail(stderr, 3000))
	}
	malformed := 0
	for _, v := range d.Violations {
		if v.Kind != "malformed_frame" {
			t.Fatalf("unexpected violation %+v", v)
		}
		malformed++
	}
	if malformed != 4 {
		t.Fatalf("%d malformed_frame violations, want 4 (2 per rank): %+v", malformed, d.Violations)
	}
	t.Run("python-json-load", func(t *testing.T) {
		py := testutil.Need(t, "python3")
		if out, err := exec.Command(py, "-c", "import json,sys; json.load(open(sys.argv[1]))", doc).CombinedOutput(); err != nil {
			t.Fatalf("python's json.load: %v\n%s", err, out)
		}
	})
}

// TestHostileStatusClientNeverReads: a status client pipelines thousands of GET /metrics on one connection and
// never reads an answer; rank 1 then fails. The failure is handled at once (the handler wrote while holding the
// lock the supervisor's events need, and froze failure handling) and tpurun exits with rank 1's code.
func TestHostileStatusClientNeverReads(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	s := startStalled(t, dir, []string{testutil.Fake("hang"), testutil.FakeRank(1, "exitongo:3")}, "--nprocs", "2",
		"--status-addr", "127.0.0.1:0", "--", testutil.Program(t))
	addr, stderr := watchStatusAddr(t, s.errR)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Small buffers on the client's side (the server's stop growing once it stops reading), so that the backlog
	// fills after a few hundred kilobytes, not after the megabytes autotuned buffers hold: a loaded machine's
	// server takes minutes to answer that many requests.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	_ = conn.(*net.TCPConn).SetWriteBuffer(4096)
	go floodStatusRequests(conn)
	// The server stops reading requests once its handler is stuck writing an answer nobody reads: then the
	// client's writes block. Rank 1 fails after that.
	testutil.Eventually(t, "the status client's requests to back up (its write blocked)", func() bool {
		return testutil.GoroutineWaits("IO wait", "floodStatusRequests")
	})
	testutil.WaitReady(t, dir, 2) // both workers are running (and recorded their pids) before rank 1 fails
	testutil.Go(t, dir)
	// A failure handling frozen behind the stuck handler never ends the run: killed at the deadline, it fails.
	if code := testutil.WaitExit(t, s.cmd); code != 3 {
		t.Fatalf("tpurun: exit %d, want 3\n%s", code, stderr())
	}
	assertNothingLeft(t, dir, 2)
}

// floodStatusRequests pipelines GET /metrics on conn, never reading an answer, until a write fails.
func floodStatusRequests(conn net.Conn) {
	req := []byte("GET /metrics HTTP/1.1\r\nHost: tpurun\r\n\r\n")
	for {
		if _, err := conn.Write(req); err != nil {
			return
		}
	}
}

// TestHostileCallerKilled: the program that started tpurun (a Ray actor, a notebook: here a shell) is killed with
// SIGKILL. With --exit-with-parent (tpurun.run and spawn pass it) tpurun stops its workers and exits; tpurun and
// its workers ran on to the end.
func TestHostileCallerKilled(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	caller := exec.Command("sh", "-c", `"$0" --exit-with-parent --nprocs 2 -- "$1" & wait`, filepath.Join(bin, "tpurun"), testutil.Program(t))
	caller.Env = append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("hang"))
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitReady(t, dir, 2)
	killCaller(t, dir, caller)
}
