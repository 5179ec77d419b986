package proc_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

func init() {
	// stopself: print "ready", stop as a job-control stop, then print how stopSelf returned.
	testutil.Define(testutil.Verb{Name: "stopself", Run: func(*testutil.Worker) int {
		signal.Ignore(syscall.SIGHUP) // the kernel hangs up an orphaned stopped group: this test looks at the return
		fmt.Println("ready")
		gone, err := stopSelf()
		fmt.Printf("resumed parentGone=%v err=%v\n", gone, err)
		return 0
	}})
}

// stopSelf stops this process as a job-control stop and returns once SIGCONT continues it: a Stopper's Stop, for
// a process that keeps no Stopper.
func stopSelf() (parentGone bool, err error) {
	s, err := proc.NewStopper()
	if err != nil {
		return false, err
	}
	defer s.Close()
	if _, err := s.WatchContinues(); err != nil { // not armed: a SIGCONT came, Stop returns at once
		return false, err
	}
	return s.Stop()
}

// procState is the state letter of pid from /proc/PID/stat ("" when gone).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// TestStopSelf: a job of a live shell (here: a group of its own whose parent, this test, is in another group of
// the session) stops, shows as stopped and resumes on SIGCONT; a session leader's group is orphaned, so the
// kernel discards the stop and stopSelf returns at once (nothing sends SIGCONT: printing is the proof); a stopped
// job whose parent dies is resumed and says its parent is gone.
func TestStopSelf(t *testing.T) {
	start := func(spec string, attr *syscall.SysProcAttr) (*testutil.Buffer, int) {
		t.Helper()
		cmd := testutil.Command(spec)
		out := &testutil.Buffer{}
		cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = out, out, attr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return out, cmd.Process.Pid
	}
	t.Run("job", func(t *testing.T) {
		out, pid := start("stopself", &syscall.SysProcAttr{Setpgid: true})
		out.WaitFor(t, "ready\n")
		testutil.WaitFor(t, "the job stopped", func() error {
			if st := procState(pid); st != "T" {
				return fmt.Errorf("state %q", st)
			}
			return nil
		})
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		out.WaitFor(t, "resumed parentGone=false err=<nil>\n")
	})
	t.Run("orphaned", func(t *testing.T) {
		out, _ := start("stopself", &syscall.SysProcAttr{Setsid: true})
		out.WaitFor(t, "resumed parentGone=false err=<nil>\n")
	})
	// The parent is a shell, single-threaded: a parent-death signal follows the thread that forked (a Go parent
	// being killed sends it when that one of its threads exits, before the process is gone).
	t.Run("parent dies", func(t *testing.T) {
		cmd := exec.Command("/bin/sh", "-c", `"$0" & echo "child $!"; wait`, testutil.Executable())
		cmd.Env = append(os.Environ(), testutil.Self("stopself"))
		out := &testutil.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the shell's group: a job of this test's session
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		parent := cmd.Process.Pid
		line, _, _ := strings.Cut(out.WaitFor(t, "\n"), "\n")
		pid, err := strconv.Atoi(strings.TrimPrefix(line, "child "))
		if err != nil {
			t.Fatalf("stopperparent said %q", line)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		testutil.WaitFor(t, "the job stopped", func() error {
			if st := procState(pid); st != "T" {
				return fmt.Errorf("state %q", st)
			}
			return nil
		})
		if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		out.WaitFor(t, "resumed parentGone=true err=<nil>\n")
	})
}
