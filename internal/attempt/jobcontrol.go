package attempt

import (
	"syscall"

	"tpurun/internal/proc"
)

func (s *supervisor) Signal(sig syscall.Signal) {
	for _, wk := range s.ws {
		s.jobSignal(wk, sig)
	}
	if sig == syscall.SIGCONT { // the terminal may have been resized while the job was stopped (see resizeMasters)
		s.resizeMasters(s.r.windowSize())
	}
}

// jobSignal sends sig to wk's group. A worker that leads a session of its own (a pseudo-terminal) is in an
// orphaned group, for which the kernel discards stop signals: it gets SIGSTOP instead (docs/CONTROL.md).
func (s *supervisor) jobSignal(wk *child, sig syscall.Signal) {
	if wk.ctty != nil && (sig == syscall.SIGTSTP || sig == syscall.SIGTTIN || sig == syscall.SIGTTOU) {
		s.signalGroup(wk, syscall.SIGSTOP)
		return
	}
	s.signalOne(wk, sig)
}

// StopForegroundJobs stops the job in the foreground of each worker's terminal, once the workers are stopped: a
// job-control shell that saw its job stop first would take the terminal back, and fg would not resume it.
func (s *supervisor) StopForegroundJobs() {
	for _, wk := range s.ws {
		if fg := s.foreground(wk, syscall.SIGSTOP); fg > 0 {
			_ = syscall.Kill(-fg, syscall.SIGSTOP)
		}
	}
}

func (s *supervisor) Unstopped(procRoot string) []int {
	var left []int
	for _, wk := range s.ws {
		if wk.p != nil && !proc.StoppedOrGone(procRoot, wk.p.PID()) {
			left = append(left, wk.w.Rank)
		}
	}
	return left
}
