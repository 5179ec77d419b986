package launcher

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// logFileMode is the mode of every per-rank log file: readable by the run's user and group tools (0644, before
// the umask), writable by the launcher only.
const logFileMode = 0o644

// fdLimitHint says which limit to raise when err is the process running out of file descriptors, and is empty
// otherwise.
func fdLimitHint(err error) string {
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

// procLimitHint says which limit to raise when err is a fork refused for want of processes (EAGAIN: the user's
// RLIMIT_NPROC, a cgroup's pids.max, the kernel's threads-max), and is empty otherwise.
func procLimitHint(err error) string {
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

// logWriter is a per-rank log file that tells once when a write fails (a full disk, a quota) and then drops the
// rest: a log file that cannot be written never stops or slows the run, and the console keeps every line.
type logWriter struct {
	f      *os.File
	failed bool
	warn   func(path string, err error)
}

func (l *logWriter) Write(p []byte) (int, error) {
	if l.failed {
		return len(p), nil
	}
	if _, err := l.f.Write(p); err != nil {
		l.failed = true
		l.warn(l.f.Name(), err)
	}
	return len(p), nil
}
