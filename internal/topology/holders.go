package topology

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Holder is a process that has a device node (or other file) open.
type Holder struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Path    string `json:"path"`
}

// Holders lists the processes that have any of paths open, one per (pid, path) in pid order, from the
// <procRoot>/*/fd links (as libtpu and tpu-info do), skipping processes whose fds cannot be read.
func Holders(procRoot string, paths []string) ([]Holder, error) {
	want := map[string]string{}
	for _, p := range paths {
		want[filepath.Clean(p)] = p
		if r, err := filepath.EvalSymlinks(p); err == nil {
			want[r] = p
		}
	}
	var out []Holder
	err := eachFD(procRoot, func(pid int, target string) bool {
		p, ok := want[target]
		if ok && !slices.ContainsFunc(out, func(h Holder) bool { return h.PID == pid && h.Path == p }) {
			out = append(out, Holder{PID: pid, Command: command(procRoot, pid), Path: p})
		}
		return true
	})
	return out, err
}

// eachFD calls fn with each open fd's link target of every process under procRoot, in pid order, until fn says stop.
func eachFD(procRoot string, fn func(pid int, target string) bool) error {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return fmt.Errorf("list processes in %s: %w", procRoot, err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids) // os.ReadDir sorts by name
	for _, pid := range pids {
		fdDir := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if !fn(pid, target) {
				return nil
			}
		}
	}
	return nil
}

// command returns a process's command line (or its comm name when the command line is empty).
func command(procRoot string, pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err == nil && len(b) > 0 {
		return strings.TrimSpace(strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
	}
	return readTrim(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
}

// LockState is the state of the libtpu lockfile.
type LockState struct {
	Path    string `json:"path"`
	Exists  bool   `json:"exists"`
	Held    bool   `json:"held"`
	PID     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"`
	Stale   bool   `json:"stale"` // exists but nobody holds a lock on it: harmless, libtpu takes it again
}

// Lockfile reports whether path (normally /tmp/libtpu_lockfile) exists and who holds a lock on it: first from
// <procRoot>/locks (matching the file's device and inode), then by asking the kernel (F_GETLK).
func Lockfile(procRoot, path string) (LockState, error) {
	st := LockState{Path: path}
	var sys syscall.Stat_t
	if err := syscall.Stat(path, &sys); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return st, nil
		}
		return st, fmt.Errorf("stat lockfile %s: %w", path, err)
	}
	st.Exists = true
	if pid, err := lockHolder(filepath.Join(procRoot, "locks"), sys); err == nil && pid > 0 {
		st.Held, st.PID = true, pid
	} else if pid := getlk(path); pid > 0 {
		st.Held, st.PID = true, pid
	}
	if st.Held {
		st.Command = command(procRoot, st.PID)
	} else {
		st.Stale = true
	}
	return st, nil
}

// lockHolder finds the pid of a lock on the file with the given stat in a /proc/locks table. Lines look like
// "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters have "->" and are skipped).
func lockHolder(locksPath string, st syscall.Stat_t) (int, error) {
	f, err := os.Open(locksPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] == "->" {
			continue
		}
		id := strings.Split(fields[5], ":")
		if len(id) != 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(id[0], 16, 64)
		mi, err2 := strconv.ParseUint(id[1], 16, 64)
		ino, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err == nil && ma == uint64(unix.Major(st.Dev)) && mi == uint64(unix.Minor(st.Dev)) && ino == st.Ino {
			return pid, nil
		}
	}
	return 0, sc.Err()
}

// getlk asks the kernel whether a write lock on the whole file would conflict and with whose (another process's).
func getlk(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if f, err = os.Open(path); err != nil {
			return 0
		}
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK} // the whole file
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// DevNodes lists the device nodes of the host's chips (or GPUs), for Holders.
func (h *Host) DevNodes() []string {
	var out []string
	for _, c := range h.Device.V.Kind().devices(h) {
		if c.DevNode != "" {
			out = append(out, c.DevNode)
		}
	}
	return out
}

// CheckFree is the pre-launch check: a *BusyError when another process holds a usable chip's device node open.
func (h *Host) CheckFree() error {
	paths := h.Device.V.Kind().usableNodes(h)
	if len(paths) == 0 {
		return nil
	}
	holders, err := Holders(h.ProcRoot, paths)
	if err != nil {
		return err
	}
	others := slices.DeleteFunc(holders, func(x Holder) bool { return x.PID == os.Getpid() })
	if len(others) > 0 {
		return &BusyError{Holders: others}
	}
	return nil
}
