package proc_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// heldCheck starts a child that exits 7 (leaving a lingering grandchild) with StartHeld through rp (nil: its own
// waiting goroutine) and proves the hold: the exit is delivered at once, the child stays a zombie (its pid, and so
// its group id, cannot be reused) while other children are still reaped, signalling it is harmless, and Release
// reaps it with its resource usage; after that Signal touches nothing.
func heldCheck(rp *proc.Reaper) error {
	got := make(chan proc.Exit, 1)
	p, _, err := startOrphaner(func(cmd *exec.Cmd) (*proc.Process, error) {
		return proc.StartHeld(rp, cmd, func(p *proc.Process) { got <- p.Status() })
	})
	if err != nil {
		return err
	}
	ex, err := within(got, "the exit of a held child to be delivered")
	if err != nil {
		return err
	}
	if ex.PID != p.PID() || ex.ExitCode != 7 || ex.Signal != 0 || ex.Wall <= 0 {
		return fmt.Errorf("delivered exit %+v, want pid %d code 7", ex, p.PID())
	}
	// The event after which a reap of the held child would have happened: the reaper reaped the orphan beside it
	// (its wait loop went past the zombie); without a reaper, the child's own waiting goroutine waits for Release.
	if rp != nil {
		err = testutil.Poll("the orphan reaped beside the held zombie", func() error {
			if rp.Orphans() < 1 {
				return errors.New("a held zombie kept the reaper from reaping an orphan")
			}
			return nil
		})
	} else {
		err = testutil.Poll("the held child's waiting goroutine to wait for Release", func() error {
			if !testutil.GoroutineWaits("chan receive", "proc.(*Process).wait") {
				return errors.New("not yet")
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	if st := state(p.PID()); st != "Z" {
		return fmt.Errorf("held child %d is in state %q, want a zombie (Z) until released", p.PID(), st)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal a held zombie: %w", err)
	}
	ex = p.Release()
	if ex.ExitCode != 7 || ex.MaxRSS <= 0 || ex.UserCPU+ex.SysCPU <= 0 {
		return fmt.Errorf("released exit %+v, want code 7 with resource usage", ex)
	}
	if proc.Alive(p.PID()) {
		return fmt.Errorf("pid %d still exists after Release", p.PID())
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("signal after release: %w", err)
	}
	return nil
}

// state is the state letter of pid in /proc/<pid>/stat, "" when it is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

func heldReaperMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	return heldCheck(rp)
}

// TestStartHeld: a held worker stays an unreaped zombie after its exit is delivered, until Release: with its own
// waiting goroutine, and under a subreaper's wait loop (in a re-executed test binary).
func TestStartHeld(t *testing.T) {
	t.Run("own-wait", func(t *testing.T) {
		if err := heldCheck(nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reaper", func(t *testing.T) {
		runMain(t, "held-reaper-main")
	})
}

// TestHeldStatus: the exit a held child delivers before it is reaped is the zombie's own wait status (exit code,
// or the killing signal), and it stays a zombie until Release, which reports the same.
func TestHeldStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
		sig    syscall.Signal
	}{{"exit 3", 3, 0}, {"kill -KILL $$", -1, syscall.SIGKILL}, {"kill -TERM $$", -1, syscall.SIGTERM}, {"exit 0", 0, 0}} {
		p, err := proc.StartHeld(nil, exec.Command("/bin/sh", "-c", tc.script), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := p.Status()
		if st.ExitCode != tc.code || st.Signal != tc.sig {
			t.Errorf("%q: held status code %d signal %v, want %d %v", tc.script, st.ExitCode, st.Signal, tc.code, tc.sig)
		}
		if s := state(p.PID()); s != "Z" {
			t.Errorf("%q: state %q before Release, want a zombie (Z)", tc.script, s)
		}
		if ex := p.Release(); ex.ExitCode != tc.code || ex.Signal != tc.sig {
			t.Errorf("%q: released exit code %d signal %v, want %d %v", tc.script, ex.ExitCode, ex.Signal, tc.code, tc.sig)
		}
	}
}
