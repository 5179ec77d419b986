package stop

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// sigPolicy is what tpurun does with a signal it receives: the table of docs/CONTROL.md, in one place.
type sigPolicy int

// The signal policies.
const (
	policyForward  sigPolicy = iota // sent once to every worker group; the run goes on
	policyStop                      // the run stops: sent as is to every group, grace, SIGKILL
	policyJobStop                   // job control: every group stopped, then tpurun stops itself
	policyContinue                  // SIGCONT: sent to every group
	policyOwn                       // tpurun's own, never forwarded: SIGCHLD, SIGURG, SIGPIPE, SIGPROF
	policyNone                      // cannot be caught: SIGKILL, SIGSTOP, and 32-34 (the C libraries')
)

// policyOf is the policy of s.
func policyOf(s syscall.Signal) sigPolicy {
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT:
		return policyStop
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return policyJobStop
	case syscall.SIGCONT:
		return policyContinue
	case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGPROF:
		return policyOwn
	case syscall.SIGKILL, syscall.SIGSTOP, 32, 33, 34: // 32-34: the C libraries' own; Go cannot catch them
		return policyNone
	}
	if s < 1 || s > 64 {
		return policyNone
	}
	return policyForward
}

// caughtSignals are the signals tpurun catches (for Spec.Signals): every signal it acts on or forwards, except those
// inherited as ignored (nohup, a shell's background job): left uncaught, they stay ignored in tpurun and in every
// worker. Call it before any signal.Notify of the process.
func caughtSignals() []os.Signal {
	ignored := proc.SignalMask("/proc/self/status", "SigIgn")
	var out []os.Signal
	for n := 1; n <= 64; n++ {
		s := syscall.Signal(n)
		switch policyOf(s) {
		case policyOwn, policyNone:
			continue
		}
		if ignored&(1<<(n-1)) != 0 || signal.Ignored(s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// NotifySignals routes every caught signal (see caughtSignals) to the returned channel, for Spec.Signals, and SIGPIPE
// nowhere: with it caught, a write to a closed stdout or stderr fails with EPIPE, which the run reports, instead of
// the Go runtime killing tpurun without a teardown. stop undoes it.
func NotifySignals() (sigs <-chan os.Signal, stop func()) {
	c, pipe := make(chan os.Signal, 64), make(chan os.Signal, 1)
	signal.Notify(c, caughtSignals()...)
	signal.Notify(pipe, syscall.SIGPIPE)
	return c, func() { signal.Stop(c); signal.Stop(pipe) }
}

// HurryOnStop is what a stop signal from sigs does once Run has returned: only writes of the output are left, and
// from then on each waits at most console.AfterStop for its reader (console.Stop; exit 128+N if output was
// dropped). Other signals are dropped. It reads sigs until the process exits.
func HurryOnStop(sigs <-chan os.Signal, consoles ...*console.Console) {
	if sigs == nil {
		return
	}
	go func() {
		for s := range sigs {
			if sig, ok := s.(syscall.Signal); ok && policyOf(sig) == policyStop {
				console.Stop(sig, consoles...)
			}
		}
	}()
}

// Coalesce relays in to the returned channel without losing a signal that matters: it takes every signal from in
// at once (so the os/signal channel never fills) and keeps each distinct signal pending once (a stop signal twice:
// the second means "kill now"), in arrival order. A storm of SIGUSR1 is one pending SIGUSR1, as the kernel merges
// pending signals; the SIGTERM behind it is still delivered. It returns when done is closed.
func Coalesce(in <-chan os.Signal, done <-chan struct{}) <-chan os.Signal {
	out := make(chan os.Signal)
	go func() {
		var pending []os.Signal
		for {
			var send chan os.Signal
			var next os.Signal
			if len(pending) > 0 {
				send, next = out, pending[0]
			}
			select {
			case s := <-in:
				if pendable(pending, s) {
					pending = append(pending, s)
				}
			case send <- next:
				pending = pending[1:]
			case <-done:
				return
			}
		}
	}()
	return out
}

// pendable reports whether s may join pending: a stop signal up to twice (a second SIGINT kills at once), any
// other once.
func pendable(pending []os.Signal, s os.Signal) bool {
	n := 0
	for _, p := range pending {
		if p == s {
			n++
		}
	}
	sig, _ := s.(syscall.Signal)
	return n == 0 || n == 1 && policyOf(sig) == policyStop
}

// ExitWithParent makes this process send itself SIGTERM when the process that started it exits
// (proc.ExitWithParent), so a launcher whose caller was killed stops its workers gracefully. A caller already gone
// is a *failure.SignalError (exit 143).
func ExitWithParent() error {
	if err := proc.ExitWithParent(syscall.SIGTERM); err != nil {
		if errors.Is(err, proc.ErrParentGone) {
			return &failure.SignalError{Signal: syscall.SIGTERM, During: "the start: the process that started tpurun has already exited"}
		}
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	return nil
}
