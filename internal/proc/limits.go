package proc

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// LimitHint says which limit to raise when err is the process running out of file descriptors (EMFILE, ENFILE) or
// a fork refused for want of processes (EAGAIN: the user's RLIMIT_NPROC, a cgroup's pids.max, the kernel's
// threads-max), and is empty otherwise.
func LimitHint(err error) string {
	var lim syscall.Rlimit
	switch {
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		return fmt.Sprintf(" (out of file descriptors: RLIMIT_NOFILE is %d (hard %d); raise ulimit -n, every worker "+
			"needs about 6)", lim.Cur, lim.Max)
	case errors.Is(err, syscall.EAGAIN):
		_ = syscall.Getrlimit(unix.RLIMIT_NPROC, &lim)
		return fmt.Sprintf(" (out of processes: RLIMIT_NPROC is %d (hard %d), counted over every process of the "+
			"user; raise ulimit -u, or a container's pids limit, or start fewer workers)", lim.Cur, lim.Max)
	}
	return ""
}
