package proc

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// FDLimitHint says which limit to raise when err is the process running out of file descriptors, and is empty
// otherwise.
func FDLimitHint(err error) string {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return ""
	}
	var lim syscall.Rlimit
	if e := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); e != nil {
		return " (out of file descriptors: raise ulimit -n; every worker needs about 6)"
	}
	return fmt.Sprintf(" (out of file descriptors: RLIMIT_NOFILE is %d (hard %d); raise ulimit -n, every worker needs about 6)",
		lim.Cur, lim.Max)
}

// ForkLimitHint says which limit to raise when err is a fork refused for want of processes (EAGAIN: the user's
// RLIMIT_NPROC, a cgroup's pids.max, the kernel's threads-max), and is empty otherwise.
func ForkLimitHint(err error) string {
	if !errors.Is(err, syscall.EAGAIN) {
		return ""
	}
	var lim syscall.Rlimit
	if e := syscall.Getrlimit(unix.RLIMIT_NPROC, &lim); e != nil {
		return " (out of processes: raise ulimit -u, or a container's pids limit, or start fewer workers)"
	}
	return fmt.Sprintf(" (out of processes: RLIMIT_NPROC is %d (hard %d), counted over every process of the user; "+
		"raise ulimit -u, or a container's pids limit, or start fewer workers)", lim.Cur, lim.Max)
}
