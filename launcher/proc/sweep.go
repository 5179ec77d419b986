package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Sweep finds every process under procRoot (normally "/proc") whose environment holds key=value, except this
// process, and sends it sig. It returns the pids it signalled. Processes that vanish or cannot be read while
// scanning are skipped: a process that changed its environment with execve escapes the sweep.
func Sweep(procRoot, key, value string, sig syscall.Signal) ([]int, error) {
	pids, err := FindByEnv(procRoot, key, value)
	if err != nil {
		return nil, err
	}
	var hit []int
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			if !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("sweep: signal %v to pid %d carrying %s=%s: %w", sig, pid, key, value, err))
			}
			continue
		}
		hit = append(hit, pid)
	}
	return hit, errors.Join(errs...)
}

// FindByEnv lists the pids under procRoot whose /proc/<pid>/environ holds exactly key=value, excluding this
// process.
func FindByEnv(procRoot, key, value string) ([]int, error) {
	if key == "" || value == "" {
		return nil, fmt.Errorf("find by env: empty key %q or value %q would match too much", key, value)
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("find by env: read %s: %w", procRoot, err)
	}
	want := []byte(key + "=" + value)
	me := self()
	buf := make([]byte, 64<<10)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me || pid <= 1 {
			continue
		}
		var b []byte
		b, buf = readSmall(filepath.Join(procRoot, e.Name(), "environ"), buf)
		if EnvironHas(b, want) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// readSmall reads a whole /proc file into buf (grown as needed) with plain open/read/close: os.ReadFile's
// stat and poller registration would triple the syscalls of a sweep over every process of the host. A file
// that cannot be read (gone, not ours) reads as empty.
func readSmall(path string, buf []byte) ([]byte, []byte) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf
	}
	defer syscall.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			return buf[:n], buf
		}
		n += k
	}
}

// EnvironHas reports whether a NUL-separated environ block holds the exact entry kv ("KEY=value").
func EnvironHas(environ, kv []byte) bool {
	for len(environ) > 0 {
		i := bytes.IndexByte(environ, 0)
		var entry []byte
		if i < 0 {
			entry, environ = environ, nil
		} else {
			entry, environ = environ[:i], environ[i+1:]
		}
		if bytes.Equal(entry, kv) {
			return true
		}
	}
	return false
}
