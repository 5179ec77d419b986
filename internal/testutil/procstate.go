package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// The states of processes and goroutines that tests wait for, read from /proc and from a goroutine dump: they
// turn "by now it must have happened" into an event.

// BlockedWriting reports whether a thread of process pid is blocked in write(2) on descriptor fd (a pipe nobody
// reads, say), from /proc/<pid>/task/*/syscall. Reading those needs the right to ptrace pid (the same user, or
// root).
func BlockedWriting(pid, fd int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	want := fmt.Sprintf("%d 0x%x ", syscall.SYS_WRITE, fd)
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), want) {
			return true
		}
	}
	return false
}

// Syscalls describes what each thread of pid is doing, for a failure message: "tid: syscall args..." per thread
// (/proc/<pid>/task/*/syscall; "running" when it is on a CPU).
func Syscalls(pid int) string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	var b strings.Builder
	for _, f := range tasks {
		s, err := os.ReadFile(f)
		if err != nil {
			s = []byte(err.Error())
		}
		fmt.Fprintf(&b, "%s: %.40s; ", filepath.Base(filepath.Dir(f)), strings.TrimSpace(string(s)))
	}
	return b.String()
}

// GoroutineWaits reports whether a goroutine of this process is blocked in state (as a goroutine dump names it:
// "select", "chan receive", "IO wait", ...) with fn (a function name as the dump prints it, such as
// "(*limitListener).Accept") on its stack.
func GoroutineWaits(state, fn string) bool {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(" ["+state)) && bytes.Contains(g, []byte(fn)) {
			return true
		}
	}
	return false
}

// FDTableSize is the size of process pid's descriptor table (FDSize in /proc/<pid>/status); 0 when unreadable.
func FDTableSize(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "FDSize:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
