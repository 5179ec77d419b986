package attempt

import "os"

// logFileMode is the mode of every per-rank log file: readable by the run's user and group tools (0644, before
// the umask), writable by the launcher only.
const logFileMode = 0o644

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
