package proc

import (
	"fmt"
	"syscall"
	"time"

	"tpurun/internal/failure"
)

// Exit is how a process ended, with its resource usage from wait4's rusage: the one value for it, which the
// results document converts once (results.ExitOf). Its JSON (in the outcome nodes exchange) leaves out the
// resource usage when unknown, the local wait error and the local clock.
type Exit struct {
	PID      int
	ExitCode int            // exit code, or -1 when killed by a signal
	Signal   syscall.Signal // the killing signal, 0 when it exited
	Wall     time.Duration  // from Start to the exit being seen
	MaxRSS   int64          `json:",omitzero"` // peak resident set size in bytes (ru_maxrss)
	UserCPU  time.Duration  `json:",omitzero"`
	SysCPU   time.Duration  `json:",omitzero"`
	WaitErr  error          `json:"-"` // a wait error other than a non-zero exit (e.g. exec.ErrWaitDelay), nil normally
	Finished time.Time      `json:"-"`
}

// Success reports whether the process exited with code 0.
func (e Exit) Success() bool { return e.Signal == 0 && e.ExitCode == 0 }

// ExitStatus is the shell-style status: the exit code, or 128+N when killed by signal N.
func (e Exit) ExitStatus() int {
	if e.Signal != 0 {
		return failure.ExitSignal(e.Signal)
	}
	return e.ExitCode
}

// Ended is how the process ended, as text: "ok", "exit 85" or "SIGKILL".
func (e Exit) Ended() string {
	switch {
	case e.Signal != 0:
		return failure.SignalName(e.Signal)
	case e.ExitCode == 0:
		return "ok"
	default:
		return fmt.Sprintf("exit %d", e.ExitCode)
	}
}

// CPU is the process's user and system CPU time.
func (e Exit) CPU() time.Duration { return e.UserCPU + e.SysCPU }
