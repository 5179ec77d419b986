package attempt

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

// Terminal is tpurun's controlling terminal while its stdin is that terminal and tpurun's process group was its
// foreground group at the start (an interactive shell, docker run -it). Local rank 0's group gets it (see
// docs/CONTROL.md: why rank 0's group, not one group of every worker).
type Terminal struct {
	f    *os.File
	fd   int
	own  int // tpurun's process group
	held int // the worker group that holds it now, 0 when none
}

// OpenTerminal is the terminal behind stdin when tpurun may hand it to a worker, else nil.
func OpenTerminal(stdin *os.File) *Terminal {
	if stdin == nil {
		return nil
	}
	fd := int(stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP) // ENOTTY: not a terminal, or not tpurun's controlling one
	if err != nil || fg != syscall.Getpgrp() {
		return nil
	}
	return &Terminal{f: stdin, fd: fd, own: fg}
}

// foreground is the terminal's foreground process group now (0 when it cannot be read).
func (t *Terminal) foreground() int {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil {
		return 0
	}
	return fg
}

// give makes pgid the terminal's foreground group. SIGTTOU is blocked on this thread meanwhile: tcsetpgrp from a
// background group would stop tpurun, and a caught SIGTTOU would make the kernel retry it forever.
func (t *Terminal) give(pgid int) error {
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
func (r *Runner) stdinFor(w topology.Worker) (*os.File, bool) {
	switch {
	case r.Stdin == nil || r.StdinTo == console.StdinNone:
		return nil, false
	case r.Term != nil && r.Term.foreground() == r.Term.own:
		return r.Term.f, w.LocalRank == 0
	case r.Term != nil || isTerminal(r.Stdin):
		return nil, false // tpurun runs in the background: a reader of the terminal would be stopped (SIGTTIN)
	case r.StdinTo == console.StdinFirst && w.LocalRank != 0:
		return nil, false
	}
	return r.Stdin, false
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// holdTerminal records that wk's group holds the terminal (it took it before exec) and watches it for job control.
func (s *supervisor) holdTerminal(wk *child) {
	s.holder = wk
	s.r.Term.held = wk.p.PID()
	s.installSignalWatch()
}

// holding reports whether a worker's group holds the terminal now.
func (s *supervisor) holding() bool {
	return s.holder != nil && s.r.Term != nil && s.r.Term.held != 0
}

// reclaimTerminal gives the terminal back to tpurun's group when a worker's group holds it now (not when the shell
// has taken it: tpurun never steals it).
func (s *supervisor) reclaimTerminal() {
	t := s.r.Term
	if t == nil || t.held == 0 {
		return
	}
	if t.foreground() == t.held {
		if err := t.give(t.own); err != nil {
			s.r.Log.Warn("could not take the terminal back from the workers", zap.Error(err))
		}
	}
	t.held = 0
}

// handTerminal gives the terminal to the holder's group again after SIGCONT, when tpurun is in the foreground
// (fg; after bg it stays with the shell).
func (s *supervisor) handTerminal() {
	t := s.r.Term
	h := s.holder
	if t == nil || h == nil || h.exited || t.foreground() != t.own {
		return
	}
	if err := t.give(h.p.PID()); err != nil {
		s.r.Log.Warn("could not give the terminal back to the workers", zap.Error(err))
		return
	}
	t.held = h.p.PID()
}

// releaseTerminal ends the job control of the attempt's holder.
func (s *supervisor) releaseTerminal() {
	s.holder = nil
	s.removeSignalWatch()
}
