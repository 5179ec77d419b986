package proc_test

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// Real-time signals are queued, never merged: each kill that reaches a process adds one instance. A process that
// blocks them and takes them one by one with rt_sigtimedwait therefore counts exactly how many times a signal was
// delivered to it, which a handler of a standard signal (merged while pending) cannot.
const (
	sigCounted = syscall.Signal(37) // SIGRTMIN+3
	sigMarker  = syscall.Signal(38) // dequeued after every pending 37 (the lowest pending number comes first)
)

func init() {
	testutil.Define(testutil.Verb{Name: "sigcount", Run: func(*testutil.Worker) int { return sigCounter() }})
}

// sigCounter is the body of the "sigcount" child. Stage 1 blocks both signals on its thread and execs itself as
// stage 2, so that every thread of stage 2 starts with them blocked (Go keeps the initial mask for real-time
// signals); stage 2 prints "ready" and then one line per signal instance it takes, and exits at the marker.
func sigCounter() int {
	var set unix.Sigset_t
	for _, s := range []syscall.Signal{sigCounted, sigMarker} {
		set.Val[(s-1)/64] |= 1 << ((uint(s) - 1) % 64)
	}
	if os.Getenv("PROC_SIGCOUNT_STAGE") == "" {
		runtime.LockOSThread()
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
			fmt.Println("sigmask:", err)
			return 3
		}
		err := syscall.Exec(testutil.Executable(), os.Args, append(os.Environ(), "PROC_SIGCOUNT_STAGE=2", testutil.Self("sigcount")))
		fmt.Println("exec:", err)
		return 3
	}
	runtime.LockOSThread()
	fmt.Println("ready")
	for {
		var info unix.Siginfo
		r, _, errno := syscall.Syscall6(syscall.SYS_RT_SIGTIMEDWAIT, uintptr(unsafe.Pointer(&set)),
			uintptr(unsafe.Pointer(&info)), 0, 8, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			fmt.Println("sigtimedwait:", errno)
			return 3
		}
		fmt.Println(int(r))
		if syscall.Signal(r) == sigMarker {
			return 0
		}
	}
}

// TestSignalReachesTheLeaderOnce: Signal sends one signal to a worker that leads its group, not one through its
// pidfd and another to its group (the leader got both: a second SIGTERM is "force quit now" to many programs).
func TestSignalReachesTheLeaderOnce(t *testing.T) {
	cmd := child(t, "sigcount")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.StartHeld(nil, cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child: %q", sc.Text())
	}
	if err := p.Signal(sigCounted); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(sigMarker); err != nil {
		t.Fatal(err)
	}
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if want := fmt.Sprintf("%d %d", sigCounted, sigMarker); strings.Join(got, " ") != want {
		t.Fatalf("the child took %q, want %q: one instance of each signal", strings.Join(got, " "), want)
	}
	if ex := p.Status(); !ex.Success() {
		t.Fatalf("child exit %+v", ex)
	}
}
