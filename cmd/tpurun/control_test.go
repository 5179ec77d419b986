package main

// tini's and dumb-init's own test scenarios (krallin/tini test/, Yelp/dumb-init tests/), ported to tpurun and run
// with tpurun as a child subreaper (its default) and as PID 1 of a new PID namespace (unshare --pid --fork
// --mount-proc, root). Their worker is testdata/print_signals.py, dumb-init's print_signals made exact: it blocks
// every signal and takes them one by one with sigwaitinfo, so each delivery is one line and a duplicate shows.
// docs/CONTROL.md is the design these tests hold tpurun to.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tpurun/internal/testutil"
)

// init lets the test binary play tini's sigconf-test (TPURUN_SIGCONF=1): ignore SIGINT, SIGHUP and SIGTTOU, block
// SIGTTIN, SIGUSR1 and signal 40 on its thread, and exec its arguments with those dispositions.
func init() {
	if os.Getenv("TPURUN_SIGCONF") != "" {
		os.Exit(sigconfExec())
	}
}

func sigconfExec() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTTOU) // SIG_IGN: exec keeps it
	runtime.LockOSThread()
	var set unix.Sigset_t
	for _, s := range blockedBySigconf {
		set.Val[(s-1)/64] |= 1 << ((uint(s) - 1) % 64)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil { // exec keeps this thread's mask
		fmt.Fprintln(os.Stderr, "sigmask:", err)
		return 96
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], testutil.Without(os.Environ(), "TPURUN_SIGCONF="))
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 96
}

var blockedBySigconf = []syscall.Signal{syscall.SIGTTIN, syscall.SIGUSR1, 40}

// pythonExe is the interpreter of print_signals.py: Debian's (quick to start), else the first python3 on PATH.
func pythonExe(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return testutil.Need(t, "python3")
}

// printSignals is the command line of the print_signals worker.
func printSignals(t *testing.T) []string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "print_signals.py"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{pythonExe(t), script}
}

// launched is a running tpurun (or unshare with tpurun as PID 1 in it) whose output is read line by line.
type launched struct {
	t       *testing.T
	cmd     *exec.Cmd
	target  int // the pid the test signals: tpurun itself
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
	read    chan struct{} // closed once every output line was read
	done    chan struct{}
	code    int
}

// launch starts tpurun with args and env (appended to the test's), as PID 1 of a new PID namespace when pid1, and
// reads its stdout and stderr (one stream) line by line.
// Not as PID 1, tpurun leads a process group of its own whose parent (this test) is in another group of the same
// session, as a shell's job: whatever session and group the test runs in, job control can stop and resume it.
func launch(t *testing.T, pid1 bool, env []string, args ...string) *launched {
	return launchAttr(t, &syscall.SysProcAttr{Setpgid: true}, pid1, env, args...)
}

// launchAttr is launch with the attributes tpurun starts with (not as PID 1).
func launchAttr(t *testing.T, attr *syscall.SysProcAttr, pid1 bool, env []string, args ...string) *launched {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	cmd.SysProcAttr = attr
	if pid1 {
		cmd = pid1Cmd(t, args...)
	}
	cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	l := &launched{t: t, cmd: cmd, changed: make(chan struct{}, 1), read: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	l.target = cmd.Process.Pid
	if pid1 {
		l.target = childOf(t, cmd.Process.Pid)
	}
	go l.readLines(r)
	go func() {
		_ = cmd.Wait()
		l.code = cmd.ProcessState.ExitCode()
		close(l.done)
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			_ = syscall.Kill(l.target, syscall.SIGKILL)
			_ = cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

// pid1Cmd is tpurun args as PID 1 of a new PID namespace with its own /proc.
func pid1Cmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	unshare := testutil.Need(t, "unshare") // util-linux
	testutil.Need(t, "root")               // unshare --pid
	return exec.Command(unshare, append([]string{"--pid", "--fork", "--mount-proc", filepath.Join(bin, "tpurun")}, args...)...)
}

func (l *launched) readLines(r io.ReadCloser) {
	defer close(l.read)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, sc.Text())
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

func (l *launched) output() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitFor waits until cond holds for the lines read so far (re-checked at each new line, or each 10 ms for the
// conditions on processes), or fails the test naming what.
func (l *launched) waitFor(what string, cond func(lines []string) bool) {
	l.t.Helper()
	deadline := time.NewTimer(testutil.Deadline())
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		ok := cond(slices.Clone(l.lines))
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-tick.C:
		case <-deadline.C:
			l.t.Fatalf("not within %s: %s\noutput:\n%s", testutil.Deadline(), what, l.output())
		}
	}
}

// wait waits for tpurun to end and returns its exit code with every output line read.
func (l *launched) wait() int {
	l.t.Helper()
	select {
	case <-l.done:
	case <-time.After(testutil.Deadline()):
		l.t.Fatalf("tpurun did not end within %s\noutput:\n%s", testutil.Deadline(), l.output())
	}
	<-l.read
	return l.code
}

func (l *launched) signal(s syscall.Signal) {
	l.t.Helper()
	if err := syscall.Kill(l.target, s); err != nil {
		l.t.Fatalf("kill(%d, %s): %v", l.target, unix.SignalName(s), err)
	}
}

// ranks are the lines of each rank's worker, without the prefix, and the pid each printed as ready.
func ranks(lines []string, n int) (out [][]string, pids []int) {
	out, pids = make([][]string, n), make([]int, n)
	for _, line := range lines {
		for r := range n {
			rest, ok := strings.CutPrefix(line, fmt.Sprintf("[%d] ", r))
			if !ok {
				continue
			}
			if p, ok := strings.CutPrefix(rest, "ready "); ok {
				pids[r], _ = strconv.Atoi(p)
				continue
			}
			out[r] = append(out[r], rest)
		}
	}
	return out, pids
}

// printedBy reports whether each of n ranks has printed want k times.
func printedBy(n int, want string, k int) func([]string) bool {
	return func(lines []string) bool {
		got, _ := ranks(lines, n)
		for _, g := range got {
			c := 0
			for _, l := range g {
				if l == want {
					c++
				}
			}
			if c < k {
				return false
			}
		}
		return true
	}
}

func readyAll(n int) func([]string) bool {
	return func(lines []string) bool {
		_, pids := ranks(lines, n)
		return !slices.Contains(pids, 0)
	}
}

// forwardedSignals is every signal tpurun forwards and the run goes on (docs/CONTROL.md): dumb-init's
// NORMAL_SIGNALS with tpurun's own exceptions, and the real-time signals.
func forwardedSignals() []syscall.Signal {
	skip := map[syscall.Signal]bool{syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGQUIT: true, syscall.SIGTSTP: true,
		syscall.SIGTTIN: true, syscall.SIGTTOU: true, syscall.SIGCHLD: true, syscall.SIGURG: true, syscall.SIGPIPE: true,
		syscall.SIGPROF: true, syscall.SIGKILL: true, syscall.SIGSTOP: true, 32: true, 33: true, 34: true}
	var out []syscall.Signal
	for n := 1; n <= 64; n++ {
		if s := syscall.Signal(n); !skip[s] {
			out = append(out, s)
		}
	}
	return out
}

// modes runs f as a child subreaper and as PID 1.
func modes(t *testing.T, f func(t *testing.T, pid1 bool)) {
	for _, pid1 := range []bool{false, true} {
		name := "subreaper"
		if pid1 {
			name = "pid1"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, pid1)
		})
	}
}

// TestControlForwardsEverySignalOnce (dumb-init's test_proxies_signals): every signal tpurun forwards reaches every
// worker exactly once, in order — a real-time signal twice would show, as it did when a worker got it through its
// pidfd and its group — and SIGTERM then stops the run: the workers exit 0 on it, tpurun exits 143.
func TestControlForwardsEverySignalOnce(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, pid1 bool) {
		l := launch(t, pid1, nil, append([]string{"--nprocs", "2", "--grace", "5s", "--"}, printSignals(t)...)...)
		l.waitFor("2 workers ready", readyAll(2))
		var want []string
		for _, s := range forwardedSignals() {
			l.signal(s)
			want = append(want, strconv.Itoa(int(s)))
			l.waitFor(fmt.Sprintf("every worker printed %s", unix.SignalName(s)), printedBy(2, strconv.Itoa(int(s)), 1))
		}
		l.signal(syscall.SIGTERM)
		if code := l.wait(); code != 143 {
			t.Fatalf("exit %d, want 143\n%s", code, l.output())
		}
		want = append(want, "15")
		got, _ := ranks(l.lines, 2)
		for r := range 2 {
			if !slices.Equal(got[r], want) {
				t.Fatalf("rank %d received %v\nwant exactly %v", r, got[r], want)
			}
		}
	})
}

// TestControlStopSignals: which signals stop the run, and when a stop signal is a second stop (SIGKILL now).
func TestControlStopSignals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		exitOn   string // PRINT_SIGNALS_EXIT of the workers
		grace    string
		sigs     []syscall.Signal
		code     int
		printed  []string // by each worker, in order
		ended    string   // each rank's status in the summary
		contains []string
	}{
		// SIGHUP is forwarded only: then SIGINT is the first stop, not a second one (it killed at once)
		{"hup-then-int", "2", "60s", []syscall.Signal{syscall.SIGHUP, syscall.SIGINT}, 130, []string{"1", "2"}, "ok",
			[]string{"stopped by SIGINT; every rank finished cleanly"}},
		// a preempted job does not look successful: 143 although every worker exits 0 on the SIGTERM
		{"term-workers-exit-0", "15", "60s", []syscall.Signal{syscall.SIGTERM}, 143, []string{"15"}, "ok",
			[]string{"signal: stopped by SIGTERM; every rank finished cleanly"}},
		// a stop signal is followed by SIGCONT (a stopped worker then runs its handler): a worker that lives on
		// through the grace gets both
		{"term-grace-expires", "none", "1s", []syscall.Signal{syscall.SIGTERM}, 143, []string{"15", "18"}, "SIGKILL",
			[]string{"stopped by SIGTERM; grace 1s expired, SIGKILL needed"}},
		// (the SIGCONT after the first SIGINT may come before the second stop's SIGKILL or not: "18" is not counted)
		{"int-twice", "none", "60s", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, 130, []string{"2"}, "SIGKILL",
			[]string{"second SIGINT: SIGKILL to every worker group", "stopped by SIGINT; second SIGINT, SIGKILL needed"}},
		// any stop signal once the grace began is a second stop
		{"int-then-term", "none", "60s", []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, 130, []string{"2"}, "SIGKILL",
			[]string{"second SIGTERM: SIGKILL to every worker group", "stopped by SIGINT; second SIGTERM, SIGKILL needed"}},
		{"quit", "3", "60s", []syscall.Signal{syscall.SIGQUIT}, 131, []string{"3"}, "ok", []string{"stopped by SIGQUIT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := launch(t, false, []string{"PRINT_SIGNALS_EXIT=" + tc.exitOn},
				append([]string{"--nprocs", "2", "--grace", tc.grace, "--"}, printSignals(t)...)...)
			l.waitFor("2 workers ready", readyAll(2))
			start := time.Now()
			for i, s := range tc.sigs {
				l.signal(s)
				if i < len(tc.sigs)-1 {
					l.waitFor("every worker printed "+unix.SignalName(s), printedBy(2, strconv.Itoa(int(s)), 1))
				}
			}
			code := l.wait()
			out := l.output()
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, out)
			}
			if took := time.Since(start); tc.grace == "60s" && took > 20*time.Second {
				t.Fatalf("took %s: waited out the grace period", took)
			}
			got, _ := ranks(l.lines, 2)
			for r := range 2 {
				if len(tc.sigs) > 1 && tc.ended == "SIGKILL" { // killed by a second stop: the first one's SIGCONT may not be printed yet
					got[r] = slices.DeleteFunc(got[r], func(s string) bool { return s == "18" })
				}
				if !slices.Equal(got[r], tc.printed) {
					t.Fatalf("rank %d received %v, want %v\n%s", r, got[r], tc.printed, out)
				}
			}
			for _, f := range append(tc.contains, fmt.Sprintf("  %s  ", tc.ended)) {
				if !strings.Contains(out, f) {
					t.Fatalf("output lacks %q:\n%s", f, out)
				}
			}
			for _, f := range []string{"worker failed", "root cause"} {
				if strings.Contains(out, f) {
					t.Fatalf("a deliberate stop shown as a failure (%q):\n%s", f, out)
				}
			}
			if n := strings.Count(out, "SIGKILL to every worker group"); n > 1 {
				t.Fatalf("the SIGKILL said %d times, want once:\n%s", n, out)
			}
		})
	}
}

// procState is the state letter of a pid in /proc/<pid>/stat ("T" stopped), "gone" when it is gone.
var procState = testutil.ProcState

// TestControlJobControl (dumb-init's test_shell_background_support_setsid): SIGTSTP, SIGTTIN and SIGTTOU stop every
// worker and then tpurun itself, in that order (tpurun waits for its workers to stop), as a shell's job stops;
// SIGCONT resumes them all. As PID 1 tpurun cannot stop
// itself (the kernel ignores SIGSTOP for a namespace's init): the workers stop and resume all the same.
func TestControlJobControl(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, pid1 bool) {
		l := launch(t, pid1, nil, append([]string{"--nprocs", "2", "--"}, printSignals(t)...)...)
		l.waitFor("2 workers ready", readyAll(2))
		pids := testutil.ChildrenOf(l.target) // the workers, as this namespace numbers them
		if len(pids) != 2 {
			t.Fatalf("tpurun (pid %d) has children %v, want its 2 workers", l.target, pids)
		}
		for i, s := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
			l.signal(s)
			if !pid1 { // in order, as a shell's job: once tpurun is stopped its workers are (they stay so until SIGCONT)
				l.waitFor("tpurun stopped by "+unix.SignalName(s), func([]string) bool { return procState(l.target) == "T" })
				if a, b := procState(pids[0]), procState(pids[1]); a != "T" || b != "T" {
					t.Fatalf("tpurun stopped while its workers were %s and %s: it stops them first, then itself", a, b)
				}
			}
			l.waitFor("the workers and tpurun stopped by "+unix.SignalName(s), func([]string) bool {
				return procState(pids[0]) == "T" && procState(pids[1]) == "T" && (pid1 || procState(l.target) == "T")
			})
			if pid1 && procState(l.target) == "T" {
				t.Fatal("tpurun as PID 1 stopped")
			}
			l.signal(syscall.SIGCONT)
			l.waitFor("every worker printed "+unix.SignalName(s)+" and SIGCONT", func(lines []string) bool {
				return printedBy(2, strconv.Itoa(int(s)), 1)(lines) && printedBy(2, "18", i+1)(lines)
			})
			l.waitFor("the workers and tpurun running again", func([]string) bool {
				return procState(pids[0]) != "T" && procState(pids[1]) != "T" && procState(l.target) != "T"
			})
		}
		l.signal(syscall.SIGTERM)
		if code := l.wait(); code != 143 {
			t.Fatalf("exit %d, want 143\n%s", code, l.output())
		}
	})
}

// TestControlJobControlOrphaned: tpurun leads its own session (setsid), so its process group is orphaned: nothing
// would send the SIGCONT after a stop, and a stopped tpurun would wait forever (it did, for hours, once its shell
// had gone). As the kernel does for an orphaned group, SIGTSTP, SIGTTIN and SIGTTOU are discarded and said so: the
// workers never get them and go on, and SIGTERM still ends the run.
func TestControlJobControlOrphaned(t *testing.T) {
	t.Parallel()
	l := launchAttr(t, &syscall.SysProcAttr{Setsid: true}, false, nil, append([]string{"--nprocs", "2", "--"}, printSignals(t)...)...)
	l.waitFor("2 workers ready", readyAll(2))
	for _, s := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		l.signal(s)
		name := unix.SignalName(s)
		l.waitFor(name+" ignored", func(lines []string) bool {
			return strings.Contains(strings.Join(lines, "\n"), "job control: "+name+" ignored: tpurun's process group is orphaned")
		})
		if st := procState(l.target); st == "T" {
			t.Fatalf("tpurun is stopped after %s", name)
		}
	}
	l.signal(syscall.SIGTERM)
	if code := l.wait(); code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, l.output())
	}
	// The workers print every signal they get; that they got none of these is bounded by SIGTERM's, printed after.
	if m := regexp.MustCompile(`(?m)^\[[01]\] (20|21|22)$`).FindString(l.output()); m != "" {
		t.Errorf("a worker got a job-control signal (%q):\n%s", m, l.output())
	}
	if !printedBy(2, "15", 1)(l.lines) {
		t.Errorf("the workers did not print SIGTERM:\n%s", l.output())
	}
}

// TestControlStdin: the workers read tpurun's stdin, as torchrun's do (they read /dev/null); --stdin 0 gives it to
// local rank 0 only, --stdin none to nobody.
func TestControlStdin(t *testing.T) {
	t.Parallel()
	count := []string{"/bin/sh", "-c", `n=$(wc -l) || exit 9; echo "rank $RANK read $n lines"`} // a bad stdin fails wc
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"tac", []string{"--nprocs", "1", "--", "tac"}, []string{"[0] b", "[0] a"}},
		{"all-default", append([]string{"--nprocs", "1", "--"}, count...), []string{"[0] rank 0 read 2 lines"}},
		{"rank-0", append([]string{"--nprocs", "2", "--stdin", "0", "--"}, count...), []string{"[0] rank 0 read 2 lines", "[1] rank 1 read 0 lines"}},
		{"none", append([]string{"--nprocs", "1", "--stdin", "none", "--"}, count...), []string{"[0] rank 0 read 0 lines"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(filepath.Join(bin, "tpurun"), tc.args...)
			cmd.Stdin = strings.NewReader("a\nb\n")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			last := -1
			for _, w := range tc.want {
				i := strings.Index(string(out), w+"\n")
				if i < 0 || (tc.name == "tac" && i < last) { // one worker's lines come in order
					t.Fatalf("output lacks %q (%q):\n%s", w, tc.want, out)
				}
				last = i
			}
		})
	}
}

// TestControlOrphansGetSIGTERMFirst (dumb-init's test_all_processes_receive_term_on_exit_if_setsid): a worker that
// exits 0 leaves a helper, in its process group (rank 0) or in a new session (rank 1): each helper gets SIGTERM
// once and the grace period to end (they print it; they were SIGKILLed at once), then SIGKILL.
func TestControlOrphansGetSIGTERMFirst(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, pid1 bool) {
		ps := printSignals(t)
		script := `if [ "$LOCAL_RANK" = 0 ]; then export PRINT_SIGNALS_CHILD=group; else export PRINT_SIGNALS_CHILD=setsid; fi; exec "$@"`
		args := append([]string{"--nprocs", "2", "--grace", "1s", "--", "/bin/sh", "-c", script, "sh"}, ps...)
		l := launch(t, pid1, []string{"PRINT_SIGNALS_EXIT=none"}, args...)
		if code := l.wait(); code != 0 {
			t.Fatalf("exit %d, want 0 (every worker exited 0)\n%s", code, l.output())
		}
		got, pids := ranks(l.lines, 2)
		for r, mode := range []string{"group", "setsid"} {
			if !slices.ContainsFunc(got[r], func(s string) bool { return strings.HasSuffix(s, " "+mode) && strings.HasPrefix(s, "child ") }) ||
				!slices.Equal(slices.DeleteFunc(slices.Clone(got[r]), func(s string) bool { return strings.HasPrefix(s, "child ") }), []string{"15"}) {
				t.Fatalf("rank %d's helper (%s) printed %v, want its start and exactly one SIGTERM (15)\n%s", r, mode, got[r], l.output())
			}
			if !pid1 && pids[r] != 0 {
				if err := syscall.Kill(pids[r], 0); !errors.Is(err, syscall.ESRCH) {
					t.Fatalf("helper %d is alive after tpurun: %v", pids[r], err)
				}
			}
		}
		if !strings.Contains(l.output(), "the workers left processes behind: SIGTERM, then SIGKILL after the grace period") {
			t.Fatalf("no word of the helpers:\n%s", l.output())
		}
	})
}

// TestControlDispositions (tini's sigconf test): signals ignored when tpurun starts stay ignored in the workers, as
// exec gives them (SIGINT, SIGHUP: a shell's background job, nohup; SIGTTOU), and blocked ones stay blocked (SIGTTIN,
// SIGUSR1, real-time 40). Go's runtime replaces other inherited SIG_IGN dispositions and unblocks the signals it
// must receive before tpurun can see them: docs/CONTROL.md.
func TestControlDispositions(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], filepath.Join(bin, "tpurun"), "--nprocs", "1", "--", "cat", "/proc/self/status")
	cmd.Env = append(os.Environ(), "TPURUN_SIGCONF=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mask := func(field string) uint64 {
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "[0] "+field+":"); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
		}
		t.Fatalf("no %s in the worker's status:\n%s", field, out)
		return 0
	}
	ign, blk := mask("SigIgn"), mask("SigBlk")
	for _, s := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTTOU} {
		if ign&(1<<(s-1)) == 0 {
			t.Errorf("%s was ignored when tpurun started; the worker has it not ignored (SigIgn %016x)", unix.SignalName(s), ign)
		}
	}
	for _, s := range blockedBySigconf {
		if blk&(1<<(s-1)) == 0 {
			t.Errorf("signal %d was blocked when tpurun started; the worker has it unblocked (SigBlk %016x)", s, blk)
		}
	}
}

// TestControlExitStatus (dumb-init's exit_status_test, tini's exit code test): tpurun exits with the worker's code,
// and 128+N when the worker killed itself with signal N.
func TestControlExitStatus(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, pid1 bool) {
		type tc struct {
			script string
			code   int
		}
		var cases []tc
		for _, c := range []int{0, 1, 2, 32, 64, 127, 254, 255} {
			cases = append(cases, tc{fmt.Sprintf("exit %d", c), c})
		}
		for _, s := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
			cases = append(cases, tc{fmt.Sprintf("kill -%d $$", s), 128 + int(s)})
		}
		for _, c := range cases {
			l := launch(t, pid1, nil, "--nprocs", "1", "--", "/bin/sh", "-c", c.script)
			if code := l.wait(); code != c.code {
				t.Fatalf("sh -c %q: exit %d, want %d\n%s", c.script, code, c.code, l.output())
			}
		}
	})
}

// TestControlSignalsTheWholeGroup (tini's process group test): a worker ignores SIGUSR1 and waits for its child,
// which does not; SIGUSR1 to tpurun reaches the child through the group, the worker's wait returns, and the run
// ends 0.
func TestControlSignalsTheWholeGroup(t *testing.T) {
	t.Parallel()
	script := `import signal, subprocess, sys
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
p = subprocess.Popen(["sleep", "1000"], preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_DFL))
print("ready %d" % p.pid, flush=True)
p.wait()
print("child ended by %d" % -p.returncode, flush=True)`
	l := launch(t, false, nil, "--nprocs", "1", "--", pythonExe(t), "-c", script)
	l.waitFor("worker ready", readyAll(1))
	l.signal(syscall.SIGUSR1)
	if code := l.wait(); code != 0 || !strings.Contains(l.output(), "[0] child ended by 10") {
		t.Fatalf("exit %d, want 0 and the child ended by SIGUSR1\n%s", code, l.output())
	}
}

// TestControlStoppedWorkerGetsItsStopSignal: a worker stopped from outside (kill -STOP; as after SIGTSTP to tpurun
// as PID 1) keeps the stop signal pending, so tpurun continues it after the signal (SIGCONT, as Open MPI's launcher,
// coreutils' timeout and systemd do): it runs its handler within the grace period instead of being SIGKILLed at
// its end. The grace here is longer than the test's deadline: only the handler can end the worker in time. The
// same for a --timeout and for another rank's failure, which stop the job the same way.
func TestControlStoppedWorkerGetsItsStopSignal(t *testing.T) {
	t.Parallel()
	grace := (2 * testutil.Deadline()).String()
	for _, tc := range []struct {
		name string
		args []string
		stop func(l *launched)
		code int
	}{
		{"SIGTERM", nil, func(l *launched) { l.signal(syscall.SIGTERM) }, 143},
		{"timeout", []string{"--timeout", upTimeout}, func(*launched) {}, 124},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"--nprocs", "1", "--grace", grace}, tc.args...), "--")
			l := launch(t, false, nil, append(args, printSignals(t)...)...)
			l.waitFor("the worker ready", readyAll(1))
			pids := testutil.ChildrenOf(l.target)
			if len(pids) != 1 {
				t.Fatalf("tpurun (pid %d) has children %v, want its worker", l.target, pids)
			}
			if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			l.waitFor("the worker stopped", func([]string) bool { return procState(pids[0]) == "T" })
			tc.stop(l)
			if code := l.wait(); code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, l.output())
			}
			if !printedBy(1, "15", 1)(l.lines) {
				t.Errorf("the stopped worker never ran its SIGTERM handler:\n%s", l.output())
			}
		})
	}
}
