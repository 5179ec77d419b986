package proc

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
)

// Stopper is this process's job-control stop without a lost SIGCONT, and the kernel's record of whether a stop or
// a continue came last. Through os/signal, SIGTSTP and SIGCONT come late and, pending together, in numeric order
// (SIGCONT first); and a SIGCONT sent before the process stops itself is spent: it then stays stopped for good.
//
// The kernel keeps what is needed: a stop signal discards a pending SIGCONT, and SIGCONT discards pending stop
// signals, in every thread. A Stopper owns a thread with SIGTSTP and SIGCONT blocked and keeps one of them pending
// there as a latch that the other kind clears: WatchStops keeps a SIGCONT pending, WatchContinues a SIGTSTP, and
// Stop stops the process with that pending SIGTSTP, so a SIGCONT at any moment before the stop cancels it.
type Stopper struct {
	t *starter // its thread: never unlocked, so its signal mask and pending signals end with it
}

// NewStopper starts the thread of a Stopper; Close ends it.
func NewStopper() (*Stopper, error) {
	s := &Stopper{t: newStarter()}
	var err error
	s.t.run(func() {
		var set unix.Sigset_t
		sigaddset(&set, syscall.SIGTSTP)
		sigaddset(&set, syscall.SIGCONT)
		err = unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil)
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("job-control stopper: blocking SIGTSTP and SIGCONT: %w", err)
	}
	return s, nil
}

// Close ends the Stopper's thread.
func (s *Stopper) Close() { s.t.close() }

// WatchStops sets the latch so that StopCame reports whether a stop signal was sent to this process since. It is
// not set (armed false) while a stop signal is pending for the process: setting it would discard that one.
func (s *Stopper) WatchStops() (armed bool, err error) { return s.arm(syscall.SIGCONT) }

// WatchContinues sets the latch so that ContinueCame reports whether SIGCONT was sent to this process since; Stop
// stops the process only while none was. It is not set (armed false: a continue came) while a SIGCONT is pending
// for the process: setting it would discard that one.
func (s *Stopper) WatchContinues() (armed bool, err error) { return s.arm(syscall.SIGTSTP) }

// StopCame reports whether a stop signal came since WatchStops (and no WatchContinues since).
func (s *Stopper) StopCame() bool { return !s.pending(syscall.SIGCONT) }

// ContinueCame reports whether SIGCONT came since WatchContinues (and no WatchStops since).
func (s *Stopper) ContinueCame() bool { return !s.pending(syscall.SIGTSTP) }

// stopSignals are the signals a SIGCONT discards (SIGSTOP is never left pending).
var stopSignals = []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

func (s *Stopper) arm(sig syscall.Signal) (armed bool, err error) {
	s.t.run(func() {
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
		if e := unix.Tgkill(os.Getpid(), s.t.tid, sig); e != nil {
			err = fmt.Errorf("job-control stopper: tgkill(%s): %w", failure.SignalName(sig), e)
			return
		}
		armed = true
	})
	return armed, err
}

func (s *Stopper) pending(sig syscall.Signal) bool {
	var p bool
	s.t.run(func() { p = s.pendingHere(sig) })
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

// Stop stops this process as a job-control stop (SIGTSTP's default action), unless SIGCONT came since
// WatchContinues. It returns once the process runs again (or at once: a SIGCONT came first, or the kernel discarded
// the stop of an orphaned group). parentGone: the parent exited before or during the stop, so nothing is left to
// continue the job, and the caller should resume what it stopped.
//
// For the moment of the stop the parent's death sends SIGCONT (PR_SET_PDEATHSIG on this thread, the earlier setting
// put back and raised after if it fired): a look at GroupOrphaned then a stop cannot be made safe, and the kernel
// does not continue a process of many threads whose shell dies while its threads are still entering the stop.
func (s *Stopper) Stop() (parentGone bool, err error) {
	s.t.run(func() { parentGone, err = s.stopHere() })
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
