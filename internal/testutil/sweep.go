package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// children lists this process's children (see ChildrenOf).
func children() []int { return ChildrenOf(os.Getpid()) }

// ChildrenOf lists the children of process pid, from every thread's /proc/PID/task/TID/children.
func ChildrenOf(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
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

// EndSession kills every process of session sid (a terminal's shell and its jobs: sid is the shell's pid) and
// reaps those that are this process's children (a dead shell's job comes back to a subreaper test binary), round
// after round until none is left; it returns what it killed, as "PID (name)". Only this process can reap its
// children, so a pid it reaps is never another's.
func EndSession(sid int) []string {
	var killed []string
	for range 100 {
		members := sessionMembers(sid)
		if len(members) == 0 {
			break
		}
		for _, m := range members {
			if syscall.Kill(m.pid, syscall.SIGKILL) == nil {
				killed = append(killed, strconv.Itoa(m.pid)+" ("+m.name+")")
			}
		}
		for _, m := range members {
			if ours(m) {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(m.pid, &ws, 0, nil)
			}
		}
		if !slices.ContainsFunc(members, ours) {
			// the others are reaped by their parents, or come back here, to be reaped, once those are gone
			_ = Poll("the session's other processes reaped by their parents", func() error {
				if left := sessionMembers(sid); len(left) > 0 && !slices.ContainsFunc(left, ours) {
					return fmt.Errorf("%d left", len(left))
				}
				return nil
			})
		}
	}
	return killed
}

func ours(m member) bool { return m.ppid == os.Getpid() }

type member struct {
	pid, ppid int
	name      string
}

// sessionMembers lists the processes of session sid, from /proc/*/stat.
func sessionMembers(sid int) []member {
	es, _ := os.ReadDir("/proc")
	var out []member
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state ppid pgrp session ...
		if len(f) < 4 || f[3] != strconv.Itoa(sid) {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		name := string(b[strings.IndexByte(string(b), '(')+1 : i])
		out = append(out, member{pid, ppid, name})
	}
	return out
}
