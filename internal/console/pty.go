package console

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenPty makes a pseudo-terminal for a worker's stream when tpurun runs at a terminal (docs/CONTROL.md, "Terminal
// and stdin"): the master is the launcher's, in the poller, read as a pipe's read end is (its EIO once every slave
// is closed is the end of the output, see drainReader); the slave is the worker's, blocking. The slave copies no
// input back (-echo: the user's own terminal, which tpurun never puts in raw mode, echoes what is typed) and writes
// a newline as it is (-onlcr: tpurun's terminal turns it into CR LF, and the log files keep the bytes as written).
// ws, when not nil, is its window size.
func OpenPty(ws *unix.Winsize) (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("open /dev/ptmx", err)
	}
	s, err := openSlave(m)
	if err == nil {
		err = setUp(s, ws)
		if err != nil {
			_ = unix.Close(s)
		}
	}
	if err != nil {
		_ = unix.Close(m)
		return nil, nil, err
	}
	return os.NewFile(uintptr(m), "/dev/ptmx"), os.NewFile(uintptr(s), "pty"), nil
}

// openSlave opens the slave of the master m: through the master itself (TIOCGPTPEER, Linux 4.13), else by its name
// in /dev/pts.
func openSlave(m int) (int, error) {
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return -1, os.NewSyscallError("unlockpt", err)
	}
	flags := unix.O_RDWR | unix.O_NOCTTY | unix.O_CLOEXEC
	if s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, uintptr(flags)); errno == 0 {
		return int(s), nil
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		return -1, os.NewSyscallError("ptsname", err)
	}
	s, err := unix.Open("/dev/pts/"+strconv.Itoa(int(n)), flags, 0)
	if err != nil {
		return -1, os.NewSyscallError("open pty", err)
	}
	return s, nil
}

// setUp gives the slave s its modes (no echo, no newline translation) and the window size ws.
func setUp(s int, ws *unix.Winsize) error {
	tio, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err != nil {
		return os.NewSyscallError("tcgetattr", err)
	}
	tio.Lflag &^= unix.ECHO | unix.ECHONL
	tio.Oflag &^= unix.ONLCR
	if err := unix.IoctlSetTermios(s, unix.TCSETS, tio); err != nil {
		return os.NewSyscallError("tcsetattr", err)
	}
	if ws != nil {
		return SetWindowSize(s, ws)
	}
	return nil
}

// SetWindowSize sets the window size of the terminal fd (either side of a pseudo-terminal); the kernel sends
// SIGWINCH to its foreground process group when it changed.
func SetWindowSize(fd int, ws *unix.Winsize) error {
	return os.NewSyscallError("TIOCSWINSZ", unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws))
}

// Resize sets the window size of the pseudo-terminal whose master is m (from OpenPty: without taking it out of the
// poller, as m.Fd would).
func Resize(m *os.File, ws *unix.Winsize) error {
	rc, err := m.SyscallConn()
	if err != nil {
		return err
	}
	cerr := rc.Control(func(fd uintptr) { err = SetWindowSize(int(fd), ws) })
	if cerr != nil {
		return cerr
	}
	return err
}

// ForegroundGroup is the foreground process group of the pseudo-terminal whose master is m (from OpenPty: read
// without taking it out of the poller, as m.Fd would), 0 when it has none or cannot be read.
func ForegroundGroup(m *os.File) int {
	rc, err := m.SyscallConn()
	if err != nil {
		return 0
	}
	g := 0
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCGPGRP); err == nil {
			g = v
		}
	})
	return g
}

// WindowSize is the window size of the console's terminal; nil when it is no terminal.
func (c *Console) WindowSize() *unix.Winsize {
	f, ok := c.w.(*os.File)
	if !ok {
		return nil
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return nil
	}
	return ws
}
