package launcher

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/topology"
)

// terminal is tpurun's controlling terminal while its stdin is that terminal and tpurun's process group was its
// foreground group at the start (an interactive shell, docker run -it). Local rank 0's group gets it (see
// docs/CONTROL.md: why rank 0's group, not one group of every worker).
type terminal struct {
	f    *os.File
	fd   int
	own  int // tpurun's process group
	held int // the worker group that holds it now, 0 when none
}

// openTerminal is the terminal behind stdin when tpurun may hand it to a worker, else nil.
func openTerminal(stdin *os.File) *terminal {
	if stdin == nil {
		return nil
	}
	fd := int(stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP) // ENOTTY: not a terminal, or not tpurun's controlling one
	if err != nil || fg != syscall.Getpgrp() {
		return nil
	}
	return &terminal{f: stdin, fd: fd, own: fg}
}

// foreground is the terminal's foreground process group now (0 when it cannot be read).
func (t *terminal) foreground() int {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil {
		return 0
	}
	return fg
}

// give makes pgid the terminal's foreground group. SIGTTOU is blocked on this thread meanwhile: tcsetpgrp from a
// background group would stop tpurun, and a caught SIGTTOU would make the kernel retry it forever.
func (t *terminal) give(pgid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[(syscall.SIGTTOU-1)/64] |= 1 << ((uint(syscall.SIGTTOU) - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	defer func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }()
	if err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgid); err != nil {
		return fmt.Errorf("tcsetpgrp(%d): %w", pgid, err)
	}
	return nil
}

// stdinFor is what worker w reads, and whether it takes the terminal: with a terminal in tpurun's foreground, only
// local rank 0 gets it (its group becomes the foreground group); the others read /dev/null, since a background
// reader of a terminal is stopped by the kernel.
func (j *job) stdinFor(w topology.Worker) (*os.File, bool) {
	switch {
	case j.spec.Stdin == nil || j.spec.StdinTo == console.StdinNone:
		return nil, false
	case j.term != nil && j.term.foreground() == j.term.own:
		return j.term.f, w.LocalRank == 0
	case j.term != nil || isTerminal(j.spec.Stdin):
		return nil, false // tpurun runs in the background: a reader of the terminal would be stopped (SIGTTIN)
	case j.spec.StdinTo == console.StdinFirst && w.LocalRank != 0:
		return nil, false
	}
	return j.spec.Stdin, false
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// holdTerminal records that wk's group holds the terminal (it took it before exec) and watches it for job control.
func (s *supervisor) holdTerminal(wk *child) {
	s.holder = wk
	s.j.term.held = wk.p.PID()
	s.installSignalWatch()
}

// holding reports whether a worker's group holds the terminal now.
func (s *supervisor) holding() bool {
	return s.holder != nil && s.j.term != nil && s.j.term.held != 0
}

// reclaimTerminal gives the terminal back to tpurun's group when a worker's group holds it now (not when the shell
// has taken it: tpurun never steals it).
func (s *supervisor) reclaimTerminal() {
	t := s.j.term
	if t == nil || t.held == 0 {
		return
	}
	if t.foreground() == t.held {
		if err := t.give(t.own); err != nil {
			s.j.log.Warn("could not take the terminal back from the workers", zap.Error(err))
		}
	}
	t.held = 0
}

// handTerminal gives the terminal to the holder's group again after SIGCONT, when tpurun is in the foreground
// (fg; after bg it stays with the shell).
func (s *supervisor) handTerminal() {
	t := s.j.term
	h := s.holder
	if t == nil || h == nil || h.exited || t.foreground() != t.own {
		return
	}
	if err := t.give(h.p.PID()); err != nil {
		s.j.log.Warn("could not give the terminal back to the workers", zap.Error(err))
		return
	}
	t.held = h.p.PID()
}

// releaseTerminal ends the job control of the attempt's holder.
func (s *supervisor) releaseTerminal() {
	s.holder = nil
	s.removeSignalWatch()
}
