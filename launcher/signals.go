package launcher

import (
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// NotifySignals routes every stop signal (StopSignals) and the forwarded ones to the returned channel, for
// Spec.Signals, and SIGPIPE nowhere: with it caught, a write to a closed stdout or stderr fails with EPIPE, which
// the run reports, instead of the Go runtime killing tpurun without a teardown. stop undoes it.
func NotifySignals(forwarded ...os.Signal) (sigs <-chan os.Signal, stop func()) {
	c, pipe := make(chan os.Signal, 64), make(chan os.Signal, 1)
	signal.Notify(c, append(forwarded, StopSignals()...)...)
	signal.Notify(pipe, syscall.SIGPIPE)
	return c, func() { signal.Stop(c); signal.Stop(pipe) }
}

// StopSignals are the signals whose default action terminates a process (with or without a core dump), apart from
// SIGUSR1 and SIGUSR2, which tpurun forwards to the workers, and SIGPIPE, which only ever reports a broken output
// pipe: each of them stops the run (teardown, exit 128+N) instead of killing tpurun with no teardown or a
// goroutine dump. The real-time signals are included, except 32 and 33, which the C library keeps for itself.
// A caller of Run passes them with signal.Notify on Spec.Signals, as cmd/tpurun does.
func StopSignals() []os.Signal {
	out := []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
		syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGALRM, syscall.SIGTERM, syscall.SIGSTKFLT,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSYS}
	for n := 34; n <= 64; n++ {
		out = append(out, syscall.Signal(n))
	}
	return out
}

// terminating reports whether s asks tpurun to stop (rather than only to be forwarded).
// SIGPIPE counts only when the run itself raises it (a console write error, see coalesce): NotifySignals never
// delivers the real one.
func terminating(s syscall.Signal) bool {
	return s == syscall.SIGPIPE || slices.Contains(StopSignals(), os.Signal(s))
}

// passedOn reports whether a stop signal is passed to the workers as it is (SIGINT, SIGTERM, SIGHUP and SIGQUIT,
// as torchrun does); for any other the workers get SIGTERM, and the run exits 128+N of the signal tpurun got.
func passedOn(s syscall.Signal) bool {
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// coalesce relays in to the returned channel without ever losing a signal that matters: it takes every signal
// from in at once (so the os/signal channel behind in never fills and drops one) and keeps each distinct signal
// pending once (a stop signal twice: the second one means "kill now"), in arrival order, until the job takes it.
// A storm of SIGUSR1 is one pending SIGUSR1; the SIGTERM behind it is still delivered. A write error on a console (outErr) is delivered as SIGPIPE: the run stops as for
// a stop signal and reports the error. It returns when done is closed.
func coalesce(in <-chan os.Signal, outErr <-chan error, done <-chan struct{}) <-chan os.Signal {
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
				if pendingCount(pending, s) < repeats(s) {
					pending = append(pending, s)
				}
			case <-outErr:
				outErr = nil
				if !slices.Contains(pending, os.Signal(syscall.SIGPIPE)) {
					pending = append(pending, syscall.SIGPIPE)
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

func pendingCount(pending []os.Signal, s os.Signal) int {
	n := 0
	for _, p := range pending {
		if p == s {
			n++
		}
	}
	return n
}

// repeats is how many of s may be pending at once: a stop signal twice (a second SIGINT kills at once), any other
// once.
func repeats(s os.Signal) int {
	if sig, ok := s.(syscall.Signal); ok && terminating(sig) {
		return 2
	}
	return 1
}
