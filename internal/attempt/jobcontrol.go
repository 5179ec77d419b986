package attempt

import (
	"syscall"
	"tpurun/internal/proc"
)

// JobStop stops every worker group with sig (SIGTSTP, SIGTTIN, SIGTTOU), as a shell's job stops (jobStopOne).
func (s *supervisor) JobStop(sig syscall.Signal) {
	for _, wk := range s.ws {
		s.jobStopOne(wk, sig)
	}
}

// jobStopOne stops wk's group with sig. A worker that leads a session of its own (a pseudo-terminal) is in an
// orphaned group, for which the kernel discards stop signals: it gets SIGSTOP instead (docs/CONTROL.md).
func (s *supervisor) jobStopOne(wk *child, sig syscall.Signal) {
	if wk.ctty != nil {
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

// Unstopped are the ranks of the workers neither stopped nor gone (procRoot's /proc), what a job-control stop waits
// for before tpurun stops itself.
func (s *supervisor) Unstopped(procRoot string) []int {
	var left []int
	for _, wk := range s.ws {
		if wk.p != nil && !proc.StoppedOrGone(procRoot, wk.p.PID()) {
			left = append(left, wk.w.Rank)
		}
	}
	return left
}

// Signal sends sig to every worker group (SIGHUP: the shell that started tpurun is gone while the job stopped).
func (s *supervisor) Signal(sig syscall.Signal) { s.signalAll(sig, 0) }

// Resume resumes every worker group after a job-control stop, and gives their pseudo-terminals the terminal's size
// of now (see resizeMasters).
func (s *supervisor) Resume() {
	s.signalAll(syscall.SIGCONT, 0)
	s.resizeMasters(s.r.windowSize())
}
