package proc_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/proc"
)

// threads is this process's OS thread count (/proc/self/status).
func threads(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// Waiting for many children must not cost a thread each: the exits are awaited on pidfds in the poller.
func TestWaitingForManyChildrenHoldsNoThreadPerChild(t *testing.T) {
	const n = 100
	before := threads(t)
	var ps []*proc.Process
	t.Cleanup(func() {
		for _, p := range ps {
			_ = p.Signal(syscall.SIGKILL)
			p.Wait()
		}
	})
	for range n {
		p, err := proc.Start(exec.Command("/bin/sleep", "60"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if during := threads(t); during > before+n/4 {
		t.Fatalf("%d threads while waiting for %d children (%d before): a thread per blocked wait", during, n, before)
	}
	for _, p := range ps {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		if ex := p.Wait(); ex.Signal != syscall.SIGKILL {
			t.Fatalf("pid %d: exit %+v, want killed by SIGKILL", p.PID(), ex)
		}
		if proc.Alive(p.PID()) {
			t.Fatalf("pid %d still exists after its exit was delivered", p.PID())
		}
	}
}
