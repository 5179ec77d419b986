package attempt

import (
	"errors"
	"os"
	"slices"
	"sync"
	"syscall"
	"tpurun/internal/console"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Terminal is tpurun's controlling terminal while its stdin is that terminal and tpurun's group was its foreground
// group at the start. tpurun keeps it in the foreground, so Ctrl-C, Ctrl-\ and Ctrl-Z reach tpurun, and relays what
// is typed, a line at a time, to local rank 0's pseudo-terminal (docs/CONTROL.md, "Terminal and stdin").
type Terminal struct {
	f   *os.File
	fd  int
	own int // tpurun's process group

	mu   sync.Mutex
	to   *os.File      // local rank 0's pseudo-terminal (its master), nil while none takes input
	wake [2]int        // a pipe: Close wakes the relay
	done chan struct{} // closed when the relay returned
}

// OpenTerminal is the terminal behind stdin when tpurun is in its foreground, else nil. Its relay runs until Close.
func OpenTerminal(stdin *os.File) *Terminal {
	if stdin == nil {
		return nil
	}
	fd := int(stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP) // ENOTTY: not a terminal, or not tpurun's controlling one
	if err != nil || fg != syscall.Getpgrp() {
		return nil
	}
	t := &Terminal{f: stdin, fd: fd, own: fg, done: make(chan struct{})}
	if err := unix.Pipe2(t.wake[:], unix.O_CLOEXEC); err != nil {
		return nil // no relay without a way to end it
	}
	go t.relay()
	return t
}

// inputTo makes m (a worker's pseudo-terminal master) the one that gets what is typed from now on.
func (t *Terminal) inputTo(m *os.File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.to = m
}

// inputEnd stops relaying to m (its worker exited, or its attempt is over): what is typed next stays in the terminal
// for whoever reads it next.
func (t *Terminal) inputEnd(m *os.File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.to == m {
		t.to = nil
	}
}

// Close ends the relay.
func (t *Terminal) Close() {
	_, _ = unix.Write(t.wake[1], []byte{0})
	<-t.done
	_, _ = unix.Close(t.wake[0]), unix.Close(t.wake[1])
}

// veof is the end of input a canonical terminal takes (Ctrl-D), sent on to the worker's terminal for each end of
// input and each partial line (what Ctrl-D after some text gives) that tpurun's terminal gives.
const veof = 4

// relay copies what is typed at the terminal to the worker's terminal of the moment. It reads only while tpurun's
// group is in the foreground (in the background a read would stop tpurun or take the shell's input) and a worker
// takes it (between attempts the input waits in the terminal).
func (t *Terminal) relay() {
	defer close(t.done)
	buf := make([]byte, 4096)
	for {
		fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}, {Fd: int32(t.wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 || fds[0].Revents&unix.POLLIN == 0 { // Close, or the terminal hung up
			return
		}
		t.mu.Lock()
		to := t.to
		t.mu.Unlock()
		if to == nil || console.ForegroundGroup(t.f) != t.own { // input the relay does not take yet: wait a moment
			if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(t.wake[0]), Events: unix.POLLIN}}, 100); n > 0 {
				return // Close
			}
			continue
		}
		n, err := unix.Read(t.fd, buf)
		switch {
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return // EIO: hung up
		}
		in := buf[:n]
		if n == 0 || in[n-1] != '\n' {
			in = append(in, veof) // Ctrl-D typed: an end of input, or a partial line pushed
		}
		_, _ = to.Write(in) // fails once the worker's terminal is closed: the input was for it
	}
}

// stdinFor is what the worker of local rank lr reads, and whether it reads the terminal through a pseudo-terminal
// of its own: with a terminal in tpurun's foreground, local rank 0 does (see Terminal) and the others read
// /dev/null, as the terminal gives its input to one reader.
func (r *Runner) stdinFor(lr int) (*os.File, bool) {
	switch {
	case r.Stdin == nil || r.StdinTo == console.StdinNone:
		return nil, false
	case r.Term != nil && console.ForegroundGroup(r.Term.f) == r.Term.own:
		return nil, lr == 0
	case r.Term != nil || isTerminal(r.Stdin):
		return nil, false // tpurun runs in the background: a reader of the terminal would be stopped (SIGTTIN)
	case r.StdinTo == console.StdinFirst && lr != 0:
		return nil, false
	}
	return r.Stdin, false
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// windowSize is the size of tpurun's terminal (its stdout's, else its stderr's, else its stdin's), nil without one.
func (r *Runner) windowSize() *unix.Winsize {
	for _, c := range []*console.Console{r.Stdout, r.Stderr} {
		if c != nil {
			if ws := c.WindowSize(); ws != nil {
				return ws
			}
		}
	}
	if r.Term != nil {
		if ws, err := unix.IoctlGetWinsize(r.Term.fd, unix.TIOCGWINSZ); err == nil {
			return ws
		}
	}
	return nil
}

// resizeTerminals gives every worker's pseudo-terminal tpurun's window size (SIGWINCH; the kernel signals each
// one's foreground group), and forwards the signal to the workers without one. false: no worker has one.
func (s *supervisor) resizeTerminals() bool {
	if !slices.ContainsFunc(s.ws, func(wk *child) bool { return len(wk.masters) > 0 }) {
		return false
	}
	for _, wk := range s.ws {
		if len(wk.masters) == 0 {
			s.signalOne(wk, syscall.SIGWINCH)
		}
	}
	s.resizeMasters(s.r.windowSize())
	return true
}

// resizeMasters gives every worker's pseudo-terminal the window size ws (nil: none known); the kernel signals the
// foreground group of each one whose size changed. After a resume too: the terminal may have been resized while
// the job was stopped or in the background, when the SIGWINCH went to the shell.
func (s *supervisor) resizeMasters(ws *unix.Winsize) {
	for _, wk := range s.ws {
		for _, m := range wk.masters {
			if ws == nil {
				return
			}
			if err := console.Resize(m, ws); err != nil && !errors.Is(err, os.ErrClosed) {
				s.r.Log.Debug("window size not passed on", zap.Int("rank", wk.w.Rank), zap.Error(err))
			}
		}
	}
}
