package proc

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Root is this process's own /proc, where the processes the launcher starts, signals and sweeps are listed: their
// pids are in its PID namespace. It is not detection's root (topology's TPURUN_PROC_ROOT), which may be a host's
// /proc mounted into a container, to see who holds a chip: a sweep that read that one would signal strangers.
const Root = "/proc"

// readFile reads a whole /proc file into buf (grown as needed) with plain open/read/close: os.ReadFile's stat and
// poller registration would triple the syscalls of a sweep over every process of the host. A file that cannot be
// opened (gone, not ours) reads as empty, ok false.
func readFile(path string, buf []byte) (b, grown []byte, ok bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf, false
	}
	defer syscall.Close(fd)
	if len(buf) == 0 {
		buf = make([]byte, 512) // an empty buffer would read as an empty file
	}
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
			return buf[:n], buf, true
		}
		n += k
	}
}

// SignalMask is the signal mask named field (SigIgn, ShdPnd, ...) of a /proc status file; 0 when unreadable.
func SignalMask(status, field string) uint64 {
	b, _, _ := readFile(status, nil)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			m, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return m
		}
	}
	return 0
}

// pids parses a list of pids separated by spaces, such as a children file's.
func pids(b []byte) []int {
	var out []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// procStat is what is read of /proc/<pid>/stat: the state letter (field 3: R, S, D, T, t, Z, X, ...), the parent,
// the process group and the session (fields 4 to 6).
type procStat struct {
	state           byte
	ppid, pgid, sid int
}

// readStat reads pid's procStat; ok is false when pid is gone or its stat cannot be parsed.
func readStat(procRoot string, pid int, buf *[]byte) (s procStat, ok bool) {
	var b []byte
	b, *buf, _ = readFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), *buf)
	i := bytes.LastIndexByte(b, ')') // the command name before it may hold anything
	if i < 0 {
		return s, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 {
		return s, false
	}
	s.state = f[0][0]
	var err1, err2, err3 error
	s.ppid, err1 = strconv.Atoi(string(f[1]))
	s.pgid, err2 = strconv.Atoi(string(f[2]))
	s.sid, err3 = strconv.Atoi(string(f[3]))
	return s, err1 == nil && err2 == nil && err3 == nil
}

// zombie reports whether pid has exited but is not reaped yet (state Z or X); a pid that is gone counts as a zombie
// too: nothing left to kill.
func zombie(procRoot string, pid int, buf *[]byte) bool {
	s, ok := readStat(procRoot, pid, buf)
	return !ok || s.state == 'Z' || s.state == 'X'
}
