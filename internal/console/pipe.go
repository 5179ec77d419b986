package console

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Pipe makes a pipe for a worker's stream: the read end is the launcher's, in the poller; the write end is the
// worker's, blocking as a program expects its stdout to be, never in the poller (os.Pipe would register it there,
// only to take it out again when the worker is started).
func Pipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		_, _ = syscall.Close(p[0]), syscall.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}
