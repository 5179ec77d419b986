package main

// Job control at its edges (docs/CONTROL.md, "Job control"): a SIGCONT or a SIGTERM while tpurun waits for its
// workers to stop, a stop and a continue back to back, a stop while the workers are being started, and a background
// job stopped for its output (`stty tostop`). Whatever the moment, nothing is left stopped without a way back.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"
)

// keepTSTPRank0 runs print_signals with rank 0 taking SIGTSTP itself and never stopping (PRINT_SIGNALS_TSTP=keep), as
// a program that saves its state or redraws on Ctrl-Z; rank 1 stops as the default action would.
func keepTSTPRank0(t *testing.T) []string {
	script := `if [ "$LOCAL_RANK" = 0 ]; then export PRINT_SIGNALS_TSTP=keep; fi; exec "$@"`
	return append([]string{"/bin/sh", "-c", script, "sh"}, printSignals(t)...)
}

// TestJobControlWorkerThatWillNotStop: rank 0 never stops on SIGTSTP, so tpurun waits (5 s at most) before it stops
// itself. A SIGCONT in that wait resumes every worker and cancels tpurun's own stop; a SIGTERM ends the job. Both
// were lost before (the controller slept through the wait, then stopped tpurun for good: only SIGKILL ended it).
func TestJobControlWorkerThatWillNotStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		then syscall.Signal
	}{{"SIGCONT", syscall.SIGCONT}, {"SIGTERM", syscall.SIGTERM}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := launch(t, false, nil, append([]string{"--nprocs", "2", "--"}, keepTSTPRank0(t)...)...)
			l.waitFor("2 workers ready", readyAll(2))
			_, pids := ranks(l.snapshot(), 2)
			l.signal(syscall.SIGTSTP)
			l.waitFor("both ranks got SIGTSTP, rank 1 stopped, rank 0 running", func(lines []string) bool {
				return printedBy(2, "20", 1)(lines) && procState(pids[1]) == "T" && procState(pids[0]) != "T"
			})
			l.signal(tc.then)
			if tc.then == syscall.SIGTERM {
				if code := l.wait(); code != 143 {
					t.Fatalf("exit %d, want 143\n%s", code, l.output())
				}
				return
			}
			l.waitFor("rank 1 resumed (SIGCONT printed), tpurun running", func(lines []string) bool {
				got, _ := ranks(lines, 2)
				return len(got[1]) > 1 && got[1][1] == "18" && procState(pids[1]) != "T" && procState(l.target) != "T"
			})
			l.signal(syscall.SIGTERM)
			if code := l.wait(); code != 143 {
				t.Fatalf("exit %d, want 143\n%s", code, l.output())
			}
		})
	}
}

// winchWorker prints "ready PID", then "28" for each SIGWINCH (taken with sigwaitinfo: pause() can miss one), and
// leaves every other signal to its default action: SIGTSTP stops it and SIGCONT continues it as the kernel does, the
// last of the two winning.
const winchWorker = `import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
print("ready %d" % os.getpid(), flush=True)
while True:
    signal.sigwaitinfo({signal.SIGWINCH})
    print("28", flush=True)`

// TestJobControlStopThenContinueBackToBack: `kill -TSTP p; kill -CONT p`, as fast as a script sends them: the last of
// a stop and a continue wins, so tpurun and every worker run on. The SIGWINCH sent after them is the event to wait
// for: the workers print it only once they run. Before, the continue was lost (os/signal hands both, read at once,
// SIGCONT first) and the job stayed stopped for good.
func TestJobControlStopThenContinueBackToBack(t *testing.T) {
	t.Parallel()
	l := launch(t, false, nil, "--nprocs", "2", "--", pythonExe(t), "-c", winchWorker)
	l.waitFor("2 workers ready", readyAll(2))
	_, pids := ranks(l.snapshot(), 2)
	for i := range 8 {
		for _, s := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGWINCH} {
			l.signal(s)
		}
		l.waitFor(fmt.Sprintf("round %d: the workers printed SIGWINCH, nothing stopped", i), func(lines []string) bool {
			return printedBy(2, "28", i+1)(lines) && procState(pids[0]) != "T" && procState(pids[1]) != "T" && procState(l.target) != "T"
		})
	}
	l.signal(syscall.SIGTERM)
	if code := l.wait(); code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, l.output())
	}
}

// TestJobControlStopDuringTheStart: SIGTSTP while 32 workers are still being started, at the first start and at a
// restart's (attempt 0's workers exit 3). Once tpurun is stopped, every worker it started is stopped too (before,
// the workers started after the signal ran on and wrote), and SIGCONT resumes the start: all 32 come up.
func TestJobControlStopDuringTheStart(t *testing.T) {
	t.Parallel()
	const n = 32
	for _, tc := range []struct{ name, script string }{
		{"start", `echo "ready $$"; exec sleep 1000`},
		{"restart", `if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; echo "ready $$"; exec sleep 1000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := launch(t, false, nil, "--nprocs", strconv.Itoa(n), "--max-restarts", "1", "--", "/bin/sh", "-c", tc.script)
			l.waitFor("the first worker ready", func(lines []string) bool {
				return strings.Contains(strings.Join(lines, "\n"), "] ready ")
			})
			l.signal(syscall.SIGTSTP)
			l.waitFor("tpurun stopped", func([]string) bool { return procState(l.target) == "T" })
			kids := testutil.ChildrenOf(l.target)
			for _, pid := range kids {
				if st := procState(pid); st != "T" && st != "Z" {
					t.Fatalf("tpurun is stopped, its worker %d is %q (of %d started): %s\n%s", pid, st, len(kids), signalState(pid), l.output())
				}
			}
			l.signal(syscall.SIGCONT)
			l.waitFor(fmt.Sprintf("all %d workers ready", n), readyAll(n))
			l.signal(syscall.SIGTERM)
			if code := l.wait(); code != 143 {
				t.Fatalf("exit %d, want 143\n%s", code, l.output())
			}
		})
	}
}

// TestJobControlTostop: `stty tostop`, tpurun started in the background stops on its first output (SIGTTOU), and
// one fg lets it finish, as for any process: the stop signals its writes raised before the fg are discarded at the
// resume, as the kernel discards pending stop signals. Before, they were replayed: it took three fg.
func TestJobControlTostop(t *testing.T) {
	t.Parallel()
	p, sh := interactiveShell(t)
	flag := filepath.Join(t.TempDir(), "go")
	p.write("stty tostop\n")
	p.write(filepath.Join(bin, "tpurun") + ` --nprocs 1 -- /bin/sh -c 'echo "out-$$"; while [ ! -e ` + flag + ` ]; do sleep 0.05; done; echo "end-$$"' &` + "\n")
	job := regexp.MustCompile(`\[1\] (\d+)`)
	var pid int
	p.waitFor("the job started", func(out string) bool {
		if m := job.FindStringSubmatch(out); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return pid > 0
	})
	testutil.WaitFor(t, "the job stopped for its output", func() error {
		if st := procState(pid); st != "T" {
			return fmt.Errorf("tpurun (%d) is %q\nterminal:\n%s", pid, st, p.output())
		}
		return nil
	})
	p.write("touch " + flag + "; fg; echo \"fg returned $?\"\n")
	ret := regexp.MustCompile(`fg returned (\d+)`)
	p.waitFor("fg's return", func(out string) bool { return ret.MatchString(out) })
	if out := p.output(); ret.FindStringSubmatch(out)[1] != "0" || !strings.Contains(out, "[0] out-") || !strings.Contains(out, "[0] end-") {
		t.Fatalf("one fg did not let the job finish (it stopped again: fg returns 148)\nterminal:\n%s", out)
	}
	p.write("exit 0\n")
	if code := exitOf(t, p, sh); code != 0 {
		t.Fatalf("the shell exited %d\n%q", code, p.output())
	}
}

// snapshot is the lines read so far.
func (l *launched) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}
