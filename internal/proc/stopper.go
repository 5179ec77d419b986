package proc

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
)

// Stopper is this process's job-control stop without a lost SIGCONT, and the kernel's own record of whether a stop
// or a continue came last. A process that catches SIGTSTP and SIGCONT (through os/signal) learns of them late and,
// when both came at once, in no reliable order (os/signal hands the signals pending together in numeric order: a
// SIGCONT sent right after a SIGTSTP is read first), and a SIGCONT sent before the process stops itself is spent
// on a running process: stopped after it, the process stays stopped for good.
//
// The kernel keeps what is needed: sending a stop signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) to a process discards
// the SIGCONT it has pending, and sending SIGCONT discards the pending stop signals, in every thread. A Stopper owns
// one thread of the process on which SIGTSTP and SIGCONT are blocked and keeps one of them pending there, as a
// latch that the other kind, sent to the process by anyone, clears: WatchStops keeps a SIGCONT pending (a stop
// signal clears it), WatchContinues a SIGTSTP (a SIGCONT clears it), and Stop stops the process with that pending
// SIGTSTP, so that a SIGCONT sent at any moment before the stop takes effect cancels it, as it would cancel a
// SIGTSTP nobody had caught.
type Stopper struct {
	reqs chan func()
	done chan struct{}
	tid  int
}

// NewStopper starts the thread of a Stopper; Close ends it.
func NewStopper() (*Stopper, error) {
	s := &Stopper{reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its signal mask and pending signals with it.
		runtime.LockOSThread()
		defer close(s.done)
		var set unix.Sigset_t
		sigaddset(&set, syscall.SIGTSTP)
		sigaddset(&set, syscall.SIGCONT)
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
			ready <- fmt.Errorf("job-control stopper: blocking SIGTSTP and SIGCONT: %w", err)
			return
		}
		s.tid = unix.Gettid()
		ready <- nil
		for f := range s.reqs {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// Close ends the Stopper's thread.
func (s *Stopper) Close() {
	close(s.reqs)
	<-s.done
}

// on runs f on the Stopper's thread.
func (s *Stopper) on(f func()) {
	ran := make(chan struct{})
	s.reqs <- func() { f(); close(ran) }
	<-ran
}

// WatchStops sets the latch so that StopCame reports whether a stop signal was sent to this process since. Setting
// it is a SIGCONT of this process as far as the kernel goes, which would discard a stop signal sent to the process
// and not yet taken by a thread: with one of those under way it is not set (armed false; the latch stays as that
// stop signal left it: cleared).
func (s *Stopper) WatchStops() (armed bool, err error) { return s.arm(syscall.SIGCONT) }

// WatchContinues sets the latch so that ContinueCame reports whether SIGCONT was sent to this process since; Stop
// stops the process only while none was. Setting it is a stop signal of this process as far as the kernel goes,
// which would discard a SIGCONT sent to the process and not yet taken by a thread: with one under way it is not set
// (armed false: a continue came).
func (s *Stopper) WatchContinues() (armed bool, err error) { return s.arm(syscall.SIGTSTP) }

// StopCame reports whether a stop signal came since WatchStops (and no WatchContinues since).
func (s *Stopper) StopCame() bool { return !s.pending(syscall.SIGCONT) }

// ContinueCame reports whether SIGCONT came since WatchContinues (and no WatchStops since).
func (s *Stopper) ContinueCame() bool { return !s.pending(syscall.SIGTSTP) }

// stopSignals are the signals a SIGCONT discards (SIGSTOP is never left pending).
var stopSignals = []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

func (s *Stopper) arm(sig syscall.Signal) (armed bool, err error) {
	s.on(func() {
		if s.pendingHere(sig) {
			armed = true
			return
		}
		other := []syscall.Signal{syscall.SIGCONT} // what sending sig would discard, if sent to the process
		if sig == syscall.SIGCONT {
			other = stopSignals
		}
		shared := SignalMask("/proc/thread-self/status", "ShdPnd") // sent to the process, not yet taken by a thread
		for _, o := range other {
			if shared&(1<<(o-1)) != 0 {
				return
			}
		}
		if e := unix.Tgkill(os.Getpid(), s.tid, sig); e != nil {
			err = fmt.Errorf("job-control stopper: tgkill(%s): %w", failure.SignalName(sig), e)
			return
		}
		armed = true
	})
	return armed, err
}

func (s *Stopper) pending(sig syscall.Signal) bool {
	var p bool
	s.on(func() { p = s.pendingHere(sig) })
	return p
}

// pendingHere reports whether sig is pending on the Stopper's thread (called on it).
func (s *Stopper) pendingHere(sig syscall.Signal) bool {
	var set unix.Sigset_t
	if _, _, errno := unix.RawSyscall(unix.SYS_RT_SIGPENDING, uintptr(unsafe.Pointer(&set)), 8, 0); errno != 0 { // 8: the kernel's sigset, 64 bits
		return false
	}
	return set.Val[(sig-1)/64]&(1<<((uint(sig)-1)%64)) != 0
}

// Stop stops this process as a job-control stop (SIGTSTP's default action), so that the shell that started it sees
// its job stopped, unless SIGCONT came since WatchContinues (the latch is set again if it was not). It returns once
// the process runs again: continued, or at once when there was nothing to stop for (a SIGCONT came first, the kernel
// discarded the stop of an orphaned group). It reports parentGone when the process that started this one exited
// meanwhile (before the stop, or while stopped): then nothing that does job control is left to continue the job,
// and the caller should resume what it stopped.
//
// The parent's death is made to send SIGCONT for the moment of the stop (PR_SET_PDEATHSIG on this thread, the
// earlier setting put back after; if that was a signal and the parent died, it is raised then): a look at
// GroupOrphaned followed by the stop cannot be made safe, and the kernel does not continue a process of many
// threads whose shell dies while its threads are still entering the stop.
func (s *Stopper) Stop() (parentGone bool, err error) {
	s.on(func() { parentGone, err = s.stopHere() })
	return parentGone, err
}

func (s *Stopper) stopHere() (parentGone bool, err error) {
	var cur int32 // PR_GET_PDEATHSIG writes the signal to the address it is given
	if _, _, errno := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&cur)), 0, 0, 0, 0); errno != 0 {
		return false, fmt.Errorf("stop: prctl(PR_GET_PDEATHSIG): %w", errno)
	}
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGCONT), 0, 0, 0); err != nil {
		return false, fmt.Errorf("stop: prctl(PR_SET_PDEATHSIG): %w", err)
	}
	defer func() {
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(cur), 0, 0, 0)
		if parentGone = os.Getppid() != parent; parentGone && cur != 0 {
			_ = syscall.Kill(os.Getpid(), syscall.Signal(cur)) // what the parent's death would have sent
		}
	}()
	if os.Getppid() != parent {
		return true, nil // gone already: nothing to stop for
	}
	if !s.pendingHere(syscall.SIGTSTP) {
		return false, nil // a SIGCONT came since WatchContinues: the last of a stop and a continue wins
	}
	// SIGTSTP's default action for the moment of the stop; the pending one, unblocked on this thread alone, is taken
	// here, before the call that unblocks it returns: the process stops until SIGCONT (or the kernel discards it).
	var dfl, old sigaction // zero: SIG_DFL, no flags, an empty mask, whatever the architecture's layout
	if err := rtSigaction(syscall.SIGTSTP, &dfl, &old); err != nil {
		return false, fmt.Errorf("stop: sigaction(SIGTSTP, SIG_DFL): %w", err)
	}
	var set unix.Sigset_t
	sigaddset(&set, syscall.SIGTSTP)
	err = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	if berr := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); berr != nil && err == nil {
		err = berr
	}
	if rerr := rtSigaction(syscall.SIGTSTP, &old, nil); rerr != nil {
		return false, fmt.Errorf("stop: restoring the SIGTSTP handler: %w", rerr)
	}
	if err != nil {
		return false, fmt.Errorf("stop: sigprocmask(SIGTSTP): %w", err)
	}
	return false, nil
}

func sigaddset(set *unix.Sigset_t, sig syscall.Signal) {
	set.Val[(sig-1)/64] |= 1 << ((uint(sig) - 1) % 64)
}

// sigaction is the kernel's struct sigaction on 64-bit Linux (handler, flags, restorer, mask), copied as it is.
type sigaction [4]uint64

func rtSigaction(sig syscall.Signal, act, old *sigaction) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)),
		uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
