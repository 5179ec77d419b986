package launcher

import (
	"errors"
	"fmt"
	"os"
	"syscall"
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
