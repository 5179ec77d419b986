package main

// dumb-init's tty tests (tests/tty_test.py), ported, and the terminal model of docs/CONTROL.md: tpurun runs on a
// real pseudo-terminal (/dev/ptmx), as the session leader that owns it (PID 1 of `docker run -it`) or as a job of an
// interactive shell; each worker gets pseudo-terminals of its own, local rank 0 what is typed, and tpurun keeps the
// terminal's foreground, so that Ctrl-C, Ctrl-\ and Ctrl-Z act on the whole job.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// pty is the master side of a pseudo-terminal whose slave is tpurun's controlling terminal.
type pty struct {
	t      *testing.T
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	closed chan struct{}
}

// openPty opens a new pseudo-terminal: echo and output processing off, as dumb-init's ttyflags, so the test reads
// exactly what the programs wrote.
func openPty(t *testing.T) (*pty, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("a pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ECHO
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	p := &pty{t: t, master: m, closed: make(chan struct{})}
	go func() {
		defer close(p.closed)
		buf := make([]byte, 4096)
		for {
			k, err := m.Read(buf) // EIO once no process holds the slave any more
			p.mu.Lock()
			p.out.Write(buf[:k])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { m.Close() })
	return p, s
}

func (p *pty) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *pty) write(s string) {
	p.t.Helper()
	if _, err := p.master.WriteString(s); err != nil {
		p.t.Fatal(err)
	}
}

// resize sets the terminal's window size (the kernel sends SIGWINCH to its foreground group).
func (p *pty) resize(rows, cols uint16) {
	p.t.Helper()
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		p.t.Fatal(err)
	}
}

// foreground is the terminal's foreground process group (TIOCGPGRP works on the master side).
func (p *pty) foreground() int {
	fg, _ := unix.IoctlGetInt(int(p.master.Fd()), unix.TIOCGPGRP)
	return fg
}

func (p *pty) waitFor(what string, cond func(out string) bool) {
	p.t.Helper()
	testutil.WaitFor(p.t, what, func() error {
		if out := p.output(); !cond(out) {
			return fmt.Errorf("terminal:\n%s", out)
		}
		return nil
	})
}

// onPty starts tpurun args on a new terminal as the leader of a new session that owns it (as PID 1 of a new PID
// namespace, under unshare, when pid1); it returns the terminal, the command and the pid to signal.
func onPty(t *testing.T, pid1 bool, args ...string) (*pty, *exec.Cmd, int) {
	t.Helper()
	p, slave := openPty(t)
	cmd, target := startOnPty(t, slave, pid1, args...)
	return p, cmd, target
}

// startOnPty starts tpurun args as the leader of a new session whose controlling terminal is slave (see onPty).
func startOnPty(t *testing.T, slave *os.File, pid1 bool, args ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	if pid1 {
		cmd = pid1Cmd(t, args...)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	target := cmd.Process.Pid
	if pid1 {
		target = childOf(t, cmd.Process.Pid)
	}
	return cmd, target
}

// exitOf waits for cmd and returns its exit code (-1 when it did not end in time), with the terminal read to EOF.
func exitOf(t *testing.T, p *pty, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testutil.Deadline()):
		t.Fatalf("tpurun did not end within %s\nterminal:\n%s", testutil.Deadline(), p.output())
	}
	select {
	case <-p.closed:
	case <-time.After(testutil.Deadline()):
	}
	return cmd.ProcessState.ExitCode()
}

// TestControlTerminalTac (dumb-init's test_tty): a worker reads the terminal: tac gets the lines typed and the
// end of input (they read /dev/null, and nothing came back).
func TestControlTerminalTac(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, pid1 bool) {
		p, cmd, _ := onPty(t, pid1, "--nprocs", "1", "--", "tac")
		p.write("1\n2\n3\n\x04\x04")
		if code := exitOf(t, p, cmd); code != 0 || !strings.Contains(p.output(), "[0] 3\n[0] 2\n[0] 1\n") {
			t.Fatalf("exit %d, want 0 and the lines reversed\nterminal:\n%q", code, p.output())
		}
	})
}

// ttyReport is a worker that prints whether its stdin, stdout and stderr are terminals and, at a terminal, the
// window size its stdout and stderr see (stty size's "rows cols"), then at a terminal waits for a SIGWINCH and
// prints it all again.
const ttyReport = `
import os, signal
def size(fd):
    return "%d %d" % os.get_terminal_size(fd)[::-1] if os.isatty(fd) else "-"
def report():
    print("tty %d%d%d size %s/%s" % (os.isatty(0), os.isatty(1), os.isatty(2), size(1), size(2)), flush=True)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
report()
if os.isatty(1):
    signal.sigwait({signal.SIGWINCH})
    report()
`

// TestControlTerminalWorkersGetTerminals: at a terminal, every worker's stdout and stderr are terminals (local rank
// 0's stdin too), of the terminal's window size, which follows a resize (SIGWINCH); through pipes none is.
func TestControlTerminalWorkersGetTerminals(t *testing.T) {
	t.Parallel()
	py := pythonExe(t)
	p, slave := openPty(t)
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 91}); err != nil {
		t.Fatal(err)
	}
	cmd, _ := startOnPty(t, slave, false, "--nprocs", "2", "--", py, "-c", ttyReport)
	p.waitFor("both ranks' first report", func(out string) bool {
		return strings.Contains(out, "[0] tty 111 size 33 91/33 91\n") && strings.Contains(out, "[1] tty 011 size 33 91/33 91\n")
	})
	p.resize(40, 120)
	p.waitFor("both ranks' report of the new size", func(out string) bool {
		return strings.Contains(out, "[0] tty 111 size 40 120/40 120\n") && strings.Contains(out, "[1] tty 011 size 40 120/40 120\n")
	})
	if code := exitOf(t, p, cmd); code != 0 {
		t.Fatalf("exit %d\nterminal:\n%q", code, p.output())
	}

	piped := exec.Command(filepath.Join(bin, "tpurun"), "--nprocs", "1", "--", py, "-c", ttyReport)
	piped.Stdin = strings.NewReader("")
	out, err := piped.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[0] tty 000 size -/-\n") {
		t.Fatalf("through pipes: %v, want no terminal:\n%s", err, out)
	}
}

// TestControlTerminalShell (dumb-init's test_child_gets_controlling_tty_if_we_had_one): an interactive shell as
// the worker reads what is typed, has job control ("m" in $-, without bash's "cannot set terminal process group":
// its stderr is its controlling terminal, whose foreground group it is) and exits when told.
func TestControlTerminalShell(t *testing.T) {
	t.Parallel()
	bash := testutil.Need(t, "bash")
	modes(t, func(t *testing.T, pid1 bool) {
		p, cmd, _ := onPty(t, pid1, "--nprocs", "1", "--", bash, "--norc", "--noprofile", "-i")
		p.write("echo \"flags are: [[$-]]\"\n")
		p.write("exit 0\n")
		code := exitOf(t, p, cmd)
		m := regexp.MustCompile(`\[0\] flags are: \[\[([a-zA-Z]+)\]\]`).FindStringSubmatch(p.output())
		if code != 0 || m == nil || !strings.Contains(m[1], "m") || !strings.Contains(m[1], "i") ||
			strings.Contains(p.output(), "cannot set terminal process group") || strings.Contains(p.output(), "no job control") {
			t.Fatalf("exit %d, flags %q: want 0 and an interactive shell with job control (i, m)\nterminal:\n%q", code, m, p.output())
		}
	})
}

// TestControlTerminalInputToTheNextAttempt: once local rank 0 has exited, what is typed goes to the next attempt's
// rank 0 (tpurun relays what is typed as it comes, to the rank 0 of the moment).
func TestControlTerminalInputToTheNextAttempt(t *testing.T) {
	t.Parallel()
	p, cmd, _ := onPty(t, false, "--nprocs", "1", "--max-restarts", "1", "--", "/bin/sh", "-c",
		`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; exec tac`)
	p.waitFor("attempt 1 started", func(out string) bool { return strings.Count(out, "workers started") == 2 })
	p.write("1\n2\n\x04\x04")
	if code := exitOf(t, p, cmd); code != 0 || !strings.Contains(p.output(), "[0] 2\n[0] 1\n") {
		t.Fatalf("exit %d, want 0 and attempt 1's tac reading the terminal\nterminal:\n%q", code, p.output())
	}
}

// TestControlTerminalCtrlC: Ctrl-C and Ctrl-\ at the terminal reach tpurun (its group stays the foreground group;
// the workers, each in a session of its own, get no signal from the terminal), which sends the signal once to every
// worker, ranks that handle it included; a second Ctrl-C kills (as under torchrun, whose workers share its group).
func TestControlTerminalCtrlC(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, key, exitOn string
		sig, code         int
	}{{"ctrl-c twice", "\x03", "none", 2, 130}, {"ctrl-backslash", "\x1c", "3", 3, 131}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--nprocs", "2", "--", "env", "PRINT_SIGNALS_EXIT=" + c.exitOn}, printSignals(t)...)
			p, cmd, _ := onPty(t, false, args...)
			p.waitFor("2 workers ready", func(out string) bool { return strings.Count(out, "] ready ") == 2 })
			p.write(c.key)
			got := fmt.Sprintf("%d\n", c.sig)
			p.waitFor("both ranks got the signal", func(out string) bool {
				return strings.Contains(out, "[0] "+got) && strings.Contains(out, "[1] "+got)
			})
			if c.exitOn == "none" { // the workers took it and run on: the second Ctrl-C kills
				p.write(c.key)
			}
			code := exitOf(t, p, cmd)
			out := p.output()
			if code != c.code || strings.Count(out, "[0] "+got) != 1 || strings.Count(out, "[1] "+got) != 1 {
				t.Fatalf("exit %d, want %d with each rank given signal %d once\nterminal:\n%q", code, c.code, c.sig, out)
			}
		})
	}
}

// TestControlTerminalCtrlZ: tpurun as a job of an interactive shell, its group the terminal's foreground group.
// Ctrl-Z reaches tpurun, which stops every worker and then itself, as a shell's job does, and the shell prints its
// prompt; fg (SIGCONT) resumes every worker. Each worker, in a session of its own, gets SIGSTOP: its group is
// orphaned, where the kernel would discard SIGTSTP (here the workers would take it: they print what they get).
func TestControlTerminalCtrlZ(t *testing.T) {
	t.Parallel()
	p, sh := interactiveShell(t)
	line := strings.Join(append([]string{filepath.Join(bin, "tpurun"), "--nprocs", "2", "--"}, printSignals(t)...), " ")
	p.write(line + "\n")
	p.waitFor("2 workers ready", func(out string) bool {
		return strings.Contains(out, "[0] ready ") && strings.Contains(out, "[1] ready ")
	})
	_, ws := ranks(strings.Split(p.output(), "\n"), 2)
	target := parentOf(ws[0])
	if fg := p.foreground(); fg != target {
		t.Fatalf("the terminal's foreground group is %d, want tpurun's (%d)", fg, target)
	}
	p.write("\x1a")
	p.waitFor("every process stopped and the terminal back with the shell", func(string) bool {
		return procState(ws[0]) == "T" && procState(ws[1]) == "T" && procState(target) == "T" && p.foreground() == sh.Process.Pid
	})
	p.write("fg\n")
	p.waitFor("every process running, rank 0 in the foreground, SIGCONT printed", func(out string) bool {
		return procState(ws[0]) != "T" && procState(ws[1]) != "T" && procState(target) != "T" && p.foreground() == target &&
			strings.Contains(out, "[0] 18\n") && strings.Contains(out, "[1] 18\n")
	})
	if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitFor("tpurun's exit", func(out string) bool { return strings.Contains(out, "stopped by SIGTERM (exit 143)") })
	p.write("echo \"fg returned $?\"\n") // $? of fg is the job's exit status
	p.waitFor("fg returned 143", func(out string) bool { return strings.Contains(out, "fg returned 143") })
	if strings.Contains(p.output(), "] 20\n") {
		t.Fatalf("a worker was given SIGTSTP, not SIGSTOP\n%q", p.output())
	}
	p.write("exit 0\n")
	if code := exitOf(t, p, sh); code != 0 {
		t.Fatalf("the shell exited %d\n%q", code, p.output())
	}
}

// TestControlTerminalShellJob: a job that a worker's interactive shell runs in the foreground of the worker's
// pseudo-terminal (its own process group, not the worker's) gets the keystrokes too, as at a terminal: Ctrl-Z stops
// it with the workers and tpurun, fg resumes it, Ctrl-C reaches its handler (and stops the run: the shell, which an
// interactive bash makes deaf to SIGINT, is killed after the grace).
func TestControlTerminalShellJob(t *testing.T) {
	t.Parallel()
	bash := testutil.Need(t, "bash")
	p, sh := interactiveShell(t)
	p.write(filepath.Join(bin, "tpurun") + " --nprocs 1 --grace 1s -- " + bash + " --norc --noprofile -i\n")
	p.write(`sh -c 'trap "echo INT-$$; exit 0" INT; echo "job $$"; while :; do sleep 0.05; done'` + "\n")
	job := regexp.MustCompile(`\[0\] job (\d+)`)
	var pid int
	p.waitFor("the inner job running", func(out string) bool {
		if m := job.FindStringSubmatch(out); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return pid > 0
	})
	p.write("\x1a")
	// Stopped: the job's sh loops on sleep, which dash starts with vfork; a stop that reaches the child before its
	// exec leaves sh waiting in vfork (state D) until the child is continued (seen under load: 3 in 30).
	p.waitFor("the inner job stopped, the terminal back with the shell", func(string) bool {
		return proc.Stopped("/proc", pid) && p.foreground() == sh.Process.Pid
	})
	p.write("fg\n")
	p.waitFor("the inner job resumed", func(string) bool { return !proc.Stopped("/proc", pid) && p.foreground() != sh.Process.Pid })
	p.write("\x03")
	p.waitFor("the inner job's handler, and tpurun's exit", func(out string) bool {
		return strings.Contains(out, "[0] INT-"+strconv.Itoa(pid)) && strings.Contains(out, "(exit 130)")
	})
	p.write("exit 0\n")
	if code := exitOf(t, p, sh); code != 0 {
		t.Fatalf("the shell exited %d\n%q", code, p.output())
	}
}

// TestControlTerminalResizeWhileStopped: the terminal is resized while the job is stopped (Ctrl-Z), when its
// SIGWINCH reaches the shell, not tpurun: on fg, tpurun gives the workers' terminals the size of now, and the
// worker sees the change (its SIGWINCH) as it would have in the foreground.
func TestControlTerminalResizeWhileStopped(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "tty_report.py")
	if err := os.WriteFile(script, []byte(ttyReport), 0o644); err != nil {
		t.Fatal(err)
	}
	p, sh := interactiveShell(t)
	p.resize(33, 91)
	p.write(filepath.Join(bin, "tpurun") + " --nprocs 1 -- " + pythonExe(t) + " " + script + "\n")
	p.waitFor("the first report", func(out string) bool { return strings.Contains(out, "[0] tty 111 size 33 91/33 91\n") })
	p.write("\x1a")
	p.waitFor("the job stopped, the shell's prompt back", func(out string) bool {
		return strings.Contains(out, "Stopped") && p.foreground() == sh.Process.Pid
	})
	p.resize(50, 132)
	p.write("fg\n")
	p.waitFor("the worker's report of the size of now, the job's end and the shell's prompt", func(out string) bool {
		return strings.Contains(out, "[0] tty 111 size 50 132/50 132\n") && p.foreground() == sh.Process.Pid
	})
	p.write("exit 0\n")
	if code := exitOf(t, p, sh); code != 0 { // tpurun and its worker reaped, not left to this binary
		t.Fatalf("the shell exited %d\n%q", code, p.output())
	}
}

// TestControlTerminalCtrlZFgRepeated: Ctrl-Z and fg, again and again, as a user does, with workers that leave
// SIGTSTP to its default action (which the kernel discards in their orphaned groups: tpurun stops them with
// SIGSTOP). Each fg must resume the whole job for good, and each Ctrl-Z stop it once (the shell prints "Stopped"
// once per stop of its job).
func TestControlTerminalCtrlZFgRepeated(t *testing.T) {
	t.Parallel()
	p, sh := interactiveShell(t)
	ws, target := sleepingJob(t, p, 3)
	all := append([]int{target}, ws...)
	states := func() string {
		var out []string
		for _, pid := range all {
			out = append(out, signalState(pid))
		}
		return strings.Join(out, "\n")
	}
	for i := range 10 {
		p.write("\x1a")
		// The shell prints "Stopped" once per stop of its job: one more than i+1 is a stop nobody asked for.
		testutil.WaitFor(t, fmt.Sprintf("cycle %d: every process stopped, the shell's \"Stopped\" and the terminal back", i), func() error {
			if n := strings.Count(p.output(), "Stopped"); n != i+1 {
				return fmt.Errorf("the shell said Stopped %d times, want %d\n%s\nterminal:\n%s", n, i+1, states(), p.output())
			}
			for _, pid := range all {
				if procState(pid) != "T" || p.foreground() != sh.Process.Pid {
					return fmt.Errorf("%s\nterminal:\n%s", states(), p.output())
				}
			}
			return nil
		})
		p.write("fg\n")
		testutil.WaitFor(t, fmt.Sprintf("cycle %d: every process running, tpurun in the foreground", i), func() error {
			for _, pid := range all {
				if st := procState(pid); st == "T" || st == "gone" || p.foreground() != target {
					return fmt.Errorf("%s\nterminal:\n%s", states(), p.output())
				}
			}
			return nil
		})
	}
	if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitFor("tpurun's exit", func(out string) bool { return strings.Contains(out, "stopped by SIGTERM (exit 143)") })
	if n := strings.Count(p.output(), "Stopped"); n != 10 {
		t.Fatalf("the shell said Stopped %d times for 10 Ctrl-Z\nterminal:\n%s", n, p.output())
	}
}

// TestControlTerminalShellGoneWhileStopped: tpurun, stopped by Ctrl-Z as a shell's job, loses its shell (killed):
// the kernel sends its now orphaned group SIGHUP and SIGCONT; tpurun passes both to the workers, which die of
// SIGHUP, and the run ends: nothing is left stopped, waiting for a SIGCONT nobody can send.
func TestControlTerminalShellGoneWhileStopped(t *testing.T) {
	t.Parallel()
	p, sh := interactiveShell(t)
	ws, target := sleepingJob(t, p, 2)
	job := testutil.Watch(t, target, ws[0], ws[1])
	p.write("\x1a")
	// The shell saw its job stop (tpurun's own line about it may be lost: the terminal discards its pending output
	// on Ctrl-Z), as a user who then closes the terminal would.
	p.waitFor("every process stopped, the shell's prompt back", func(out string) bool {
		return procState(ws[0]) == "T" && procState(ws[1]) == "T" && procState(target) == "T" && strings.Contains(out, "Stopped")
	})
	if err := sh.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sh.Wait()
	waitJobGone(t, p, job)
}

// TestControlTerminalShellKilledAsTheJobStops: the shell is killed while tpurun's job stop is under way, at each
// step of it (the shell may exit before tpurun has looked whether its group can be resumed, between that look and
// the stop, or while tpurun's threads are still entering the stop). tpurun's own line about the stop is no event to
// wait for: the terminal discards its pending output on Ctrl-Z. Whatever the moment, nothing is left: a
// stopped process in a group nobody can resume would wait forever (seen: tpurun and both workers stopped for good,
// 2 to 12 in 30 runs killed at once).
func TestControlTerminalShellKilledAsTheJobStops(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "bash")
	// when: the event after Ctrl-Z that the shell's kill waits for (none: at once).
	whens := map[string]func(p *pty, ws []int, target int) bool{
		"at once":        func(*pty, []int, int) bool { return true },
		"rank 0 stopped": func(_ *pty, ws []int, _ int) bool { return procState(ws[0]) == "T" },
		"rank 1 stopped": func(_ *pty, ws []int, _ int) bool { return procState(ws[1]) == "T" }, // tpurun stops itself next
		"tpurun stopped": func(_ *pty, _ []int, target int) bool { return procState(target) == "T" },
	}
	for name, when := range whens {
		for i := range 5 {
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) {
				t.Parallel()
				p, sh := interactiveShell(t)
				ws, target := sleepingJob(t, p, 2)
				job := testutil.Watch(t, target, ws[0], ws[1])
				p.write("\x1a")
				p.waitFor(name, func(string) bool { return when(p, ws, target) })
				if err := sh.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = sh.Wait()
				waitJobGone(t, p, job)
			})
		}
	}
}

// waitJobGone waits until tpurun and its workers, a dead shell's job, have exited, and reaps those re-parented to
// this test binary (the subreaper): a zombie left unreaped is a process the suite leaves behind.
func waitJobGone(t *testing.T, p *pty, job *testutil.Watched) {
	t.Helper()
	job.WaitExited(t, "tpurun and its workers gone", func(left []int) string {
		var b strings.Builder
		for _, pid := range left {
			b.WriteString(signalState(pid) + "\n")
		}
		return b.String() + "terminal:\n" + p.output()
	})
}

// interactiveShell starts `bash -i` (prompt "prompt$ ") as the session leader of a new pty, as a terminal
// would; it is killed at cleanup.
func interactiveShell(t *testing.T) (*pty, *exec.Cmd) {
	t.Helper()
	bash := testutil.Need(t, "bash")
	p, slave := openPty(t)
	sh := exec.Command(bash, "--norc", "--noprofile", "-i")
	sh.Env = append(os.Environ(), "PS1=prompt$ ")
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	t.Cleanup(func() {
		// the shell, and whatever is left of its jobs: killed, and reaped where they came back to this binary
		_ = sh.Process.Kill()
		_ = sh.Wait()
		testutil.EndSession(sh.Process.Pid)
	})
	return p, sh
}

// sleepingJob types `tpurun --nprocs n -- sh -c 'echo "ready $$"; exec sleep 1000'` at the shell on p and returns
// the workers' pids by rank and tpurun's, once every worker is ready; the shell's cleanup ends them (EndSession).
func sleepingJob(t *testing.T, p *pty, n int) (ws []int, target int) {
	t.Helper()
	p.write(filepath.Join(bin, "tpurun") + ` --nprocs ` + strconv.Itoa(n) + ` -- /bin/sh -c 'echo "ready $$"; exec sleep 1000'` + "\n")
	p.waitFor(strconv.Itoa(n)+" workers ready", func(out string) bool { return strings.Count(out, "] ready ") == n })
	_, ws = ranks(strings.Split(p.output(), "\n"), n)
	target = parentOf(ws[0])
	return ws, target
}

// signalState is pid's state and pending, blocked, ignored and caught signals, from /proc/PID/status.
func signalState(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"Name:", "State:", "PPid:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:", "SigCgt:"} {
			if strings.HasPrefix(l, k) {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return fmt.Sprintf("pid %d: %s", pid, strings.Join(out, "; "))
}

// TestControlTerminalCtrlZOrphaned: tpurun leads the terminal's session (as `setsid -c`, or a container's init with
// `-t`): its group is orphaned, no shell could resume it. Ctrl-Z reaches tpurun alone, which says why it ignores it:
// no worker is stopped, tpurun never stops itself, and the run goes on and ends.
func TestControlTerminalCtrlZOrphaned(t *testing.T) {
	t.Parallel()
	p, cmd, target := onPty(t, false, append([]string{"--nprocs", "2", "--"}, printSignals(t)...)...)
	p.waitFor("2 workers ready", func(out string) bool { return strings.Count(out, "] ready ") == 2 })
	p.write("\x1a")
	p.waitFor("the stop explained", func(out string) bool {
		return strings.Contains(out, "SIGTSTP ignored: tpurun's process group is orphaned")
	})
	if st := procState(target); st == "T" {
		t.Fatal("tpurun stopped itself")
	}
	if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, p, cmd); code != 143 || strings.Contains(p.output(), "] 20\n") {
		t.Fatalf("exit %d, want 143 and no worker given SIGTSTP\nterminal:\n%q", code, p.output())
	}
}

// parentOf is the parent of pid, from /proc/PID/stat.
func parentOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// TestControlTerminalInTheBackground: tpurun started as a background job of a shell with job control, its stdin
// still the terminal: no worker gets the terminal (a background reader of it is stopped by the kernel, SIGTTIN,
// and tpurun would wait forever); tac reads nothing and the run ends.
func TestControlTerminalInTheBackground(t *testing.T) {
	t.Parallel()
	bash := testutil.Need(t, "bash")
	p, slave := openPty(t)
	cmd := exec.Command(bash, "--norc", "--noprofile", "-m", "-c",
		`"$0" --nprocs 1 -- tac & wait $!; echo "tpurun exited $?"`, filepath.Join(bin, "tpurun"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	if code := exitOf(t, p, cmd); code != 0 || !strings.Contains(p.output(), "tpurun exited 0") {
		t.Fatalf("exit %d, want the background tpurun to end with 0\nterminal:\n%q", code, p.output())
	}
}
