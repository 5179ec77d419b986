package proc_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"tpurun/launcher/proc"
)

// reaperFake runs in a re-executed test binary (PROC_FAKE=reaper-main and friends), so that the subreaper bit and
// the wait4(-1) loop never touch the children of the other tests.
func reaperFake(mode string) (int, bool) {
	switch mode {
	case "orphaner": // start a grandchild that outlives us, print its pid, exit 7 without waiting for it
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), "PROC_FAKE=linger")
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3, true
		}
		fmt.Println(gc.Process.Pid)
		return 7, true
	case "linger":
		time.Sleep(300 * time.Millisecond)
		return 0, true
	case "tree-main", "tree-worker", "tree-escapee", "tree-leaf":
		return treeFake(mode), true
	case "adopt-main", "adopt-mid", "adopt-worker", "keep-main", "hang-parent":
		return adoptFake(mode), true
	case "held-reaper-main":
		if err := heldReaperMain(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		fmt.Println("OK")
		return 0, true
	case "reaper-main":
		if err := reaperMain(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		fmt.Println("OK")
		return 0, true
	}
	return 0, false
}

func reaperMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	got := make(chan proc.Exit, 1)
	p, gpid, err := startOrphaner(func(cmd *exec.Cmd) (*proc.Process, error) {
		return rp.Start(cmd, func(p *proc.Process) { got <- p.Wait() })
	})
	if err != nil {
		return err
	}
	select {
	case ex := <-got:
		if ex.PID != p.PID() || ex.Code != 7 || ex.Signal != 0 || ex.Wall <= 0 {
			return fmt.Errorf("delivered exit %+v, want pid %d code 7", ex, p.PID())
		}
	case <-time.After(10 * time.Second):
		return errors.New("the reaper never delivered the owned child's exit")
	}
	// The grandchild was reparented to us (subreaper) and must be reaped: no zombie left, counted as an orphan.
	deadline := time.Now().Add(10 * time.Second)
	for proc.Alive(gpid) || rp.Orphans() < 1 {
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gpid))
			return fmt.Errorf("orphan %d not reaped (orphans=%d, stat %q)", gpid, rp.Orphans(), st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A non-file stdio would need cmd.Wait's copying goroutines: refused.
	bad := exec.Command(os.Args[0])
	bad.Stdout = &bytes.Buffer{}
	if _, err := rp.Start(bad, nil); !errors.Is(err, proc.ErrNotStarted) {
		return fmt.Errorf("Start with a bytes.Buffer stdout: err %v, want ErrNotStarted", err)
	}
	return nil
}

// startOrphaner starts, with start, a child that starts a lingering grandchild, prints its pid and exits 7; it
// returns the child and the grandchild's pid.
func startOrphaner(start func(*exec.Cmd) (*proc.Process, error)) (*proc.Process, int, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PROC_FAKE=orphaner")
	r, w, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	cmd.Stdout = w
	p, err := start(cmd)
	w.Close()
	if err != nil {
		return nil, 0, err
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(r)
	gpid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return p, 0, fmt.Errorf("orphaner printed %q: %w", out.String(), err)
	}
	return p, gpid, nil
}

func TestReaperDeliversOwnExitsAndReapsOrphans(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_FAKE=reaper-main")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("reaper child: %v\n%s", err, out)
	}
}

func TestSetSubreaperIsReadBack(t *testing.T) {
	// PR_GET_CHILD_SUBREAPER (37) in a child, so this test process keeps its own parent semantics.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_FAKE=subreaper-get")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("subreaper flag after SetSubreaper: %q (%v), want 1", out, err)
	}
}

func subreaperGet() int {
	if err := proc.SetSubreaper(); err != nil {
		fmt.Println(err)
		return 1
	}
	var v int32
	if _, _, e := syscall.Syscall(syscall.SYS_PRCTL, 37, uintptr(unsafe.Pointer(&v)), 0); e != 0 {
		fmt.Println(e)
		return 1
	}
	fmt.Println(v)
	return 0
}
