package stop

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"tpurun/internal/failure"
)

// TestSignalPolicyTable: the table of docs/CONTROL.md, signal by signal.
func TestSignalPolicyTable(t *testing.T) {
	want := map[sigPolicy][]syscall.Signal{
		policyStop:     {syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT},
		policyJobStop:  {syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU},
		policyContinue: {syscall.SIGCONT},
		policyOwn:      {syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGPROF},
		policyNone:     {syscall.SIGKILL, syscall.SIGSTOP, 32, 33, 34},
	}
	listed := map[syscall.Signal]bool{}
	for p, sigs := range want {
		for _, s := range sigs {
			listed[s] = true
			if got := policyOf(s); got != p {
				t.Errorf("%s: policy %d, want %d", failure.SignalName(s), got, p)
			}
		}
	}
	for n := 1; n <= 64; n++ {
		if s := syscall.Signal(n); !listed[s] && policyOf(s) != policyForward {
			t.Errorf("%s: policy %d, want forwarded", failure.SignalName(s), policyOf(s))
		}
	}
	caught := caughtSignals()
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGWINCH, 35, 64} {
		if !slices.Contains(caught, os.Signal(s)) {
			t.Errorf("%s is not caught", failure.SignalName(s))
		}
	}
	for _, s := range []syscall.Signal{syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGKILL, 33} {
		if slices.Contains(caught, os.Signal(s)) {
			t.Errorf("%s is caught", failure.SignalName(s))
		}
	}
}
