package stop

import (
	"syscall"
	"time"
)

// Attempt is what the controller drives while one attempt of this node's workers runs (internal/attempt's
// supervisor): attached with Attach, detached with Detach, and called only on the controller's goroutine.
type Attempt interface {
	// Wakeups are the channels the loop waits on for the attempt now.
	Wakeups() Wakeups
	// GraceExpired: the grace period of Wakeups.Grace is over.
	GraceExpired()
	// CheckOrphans: a look at what the workers left (Wakeups.Orphans or Wakeups.Poll).
	CheckOrphans()

	// Stop begins to stop the attempt for x, unless it already stops (the first cause decides its verdict).
	Stop(x *Cause)
	// Forward passes a signal of the forward policy to every worker group.
	Forward(sig syscall.Signal)
	// SecondStop kills at once: the stop signal sig came again (0: the timeout expired while the grace ran); why
	// says so in words ("second SIGTERM").
	SecondStop(sig syscall.Signal, why string)
	// GraceBegan reports whether the attempt has begun to stop: a stop signal now is a second stop.
	GraceBegan() bool

	// Signal sends sig to every worker group as a shell's job control does: a stop signal (SIGTSTP, SIGTTIN,
	// SIGTTOU) stops them, SIGCONT resumes them and gives their terminals the window size of now.
	Signal(sig syscall.Signal)
	// Unstopped are the ranks of the workers neither stopped nor gone (procRoot's /proc).
	Unstopped(procRoot string) []int
	// StopForegroundJobs stops what runs in the foreground of each worker's terminal, once the workers are stopped.
	StopForegroundJobs()
}

// Wakeups are the channels of the attached attempt that the loop selects on; a nil one blocks forever.
type Wakeups struct {
	Exits   <-chan func()    // a worker exited: the call that takes its exit, made on the loop
	Grace   <-chan time.Time // the grace period expired (Attempt.GraceExpired)
	Orphans <-chan struct{}  // the reaper reaped a process while the attempt sweeps (Attempt.CheckOrphans)
	Poll    <-chan time.Time // a look at the orphans without a reaper to tell (Attempt.CheckOrphans)
}
