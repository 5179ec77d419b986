package launchertest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SweepChildren kills every child of this process and reaps it, round after round while children are left (a
// killed tpurun's orphans come back to a subreaper test binary as its children), and returns what it killed as
// "PID (name)". Run calls it once every test has ended: whatever is still running then was left behind.
func SweepChildren() []string {
	var killed []string
	for range 100 { // each round takes one generation of orphans; a fork bomb would not end the loop otherwise
		kids := children()
		if len(kids) == 0 {
			break
		}
		for _, pid := range kids {
			name, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			what := strings.TrimSpace(string(name))
			if procState(pid) == "Z" {
				what += ", exited and never reaped"
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, strconv.Itoa(pid)+" ("+what+")")
			}
		}
		for _, pid := range kids {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	return killed
}

// children lists this process's children, from every thread's /proc/self/task/TID/children.
func children() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}
