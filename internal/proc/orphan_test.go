package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestGroupOrphaned: a group whose member's parent is in another group of the same session is not orphaned (a
// shell's job); a session leader's group, and a group whose members' parents are all inside it or in another
// session, are.
func TestGroupOrphaned(t *testing.T) {
	start := func(attr *syscall.SysProcAttr, script string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = attr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children"); err == nil {
				for _, f := range strings.Fields(string(b)) { // the nested job leads a group of its own
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		b := make([]byte, 64)
		n, _ := out.Read(b) // the script says when its children are in place
		if !strings.HasPrefix(string(b[:n]), "ready") {
			t.Fatalf("the script printed %q, want ready", b[:n])
		}
		return cmd
	}
	// Its own group, its parent (this test) in another group of this session: a shell's job.
	job := start(&syscall.SysProcAttr{Setpgid: true}, "echo ready; exec sleep 3600")
	if GroupOrphaned("/proc", job.Process.Pid) {
		t.Error("a group whose leader's parent is in another group of the session is orphaned, want not")
	}
	// A session leader and a child in its group: no member's parent is in another group of the session.
	leader := start(&syscall.SysProcAttr{Setsid: true}, "sleep 3600 & echo ready; wait")
	if !GroupOrphaned("/proc", leader.Process.Pid) {
		t.Error("a session leader's group is not orphaned, want orphaned")
	}
	// A child that leads a group of its own in that session: its parent (the leader) is in another group: not orphaned.
	nested := start(&syscall.SysProcAttr{Setsid: true}, `exec python3 -c 'import subprocess
p = subprocess.Popen(["sleep", "3600"], process_group=0)
print("ready", flush=True)
p.wait()'`)
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(nested.Process.Pid) + "/task/" + strconv.Itoa(nested.Process.Pid) + "/children")
	kid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the session leader's children: %q", b)
	}
	if GroupOrphaned("/proc", kid) {
		t.Error("a background job of a live session leader is orphaned, want not")
	}
	if !GroupOrphaned("/proc", 1<<30) {
		t.Error("a group with no member is not orphaned")
	}
}

// TestStopped: a process is stopped in state T or t, and in state D (an uninterruptible wait) when a child of any of
// its threads is stopped: a vfork parent whose child a stop signal reached before its exec (seen: dash in a job that
// Ctrl-Z stopped, "D" for good, its child "T", under load). A tree under a fake /proc gives each case; a real
// process stopped by SIGSTOP gives the plain one.
func TestStopped(t *testing.T) {
	root := t.TempDir()
	proc := func(pid int, state string, children ...string) {
		dir := root + "/" + strconv.Itoa(pid)
		if err := os.MkdirAll(dir+"/task/"+strconv.Itoa(pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir+"/task/"+strconv.Itoa(pid+1000), 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (a) b) " + state + " 1 " + strconv.Itoa(pid) + " 1 0 -1 4194560"
		if err := os.WriteFile(dir+"/stat", []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		// The children of the first thread, then of a second one (the thread that called vfork).
		for i, task := range []int{pid, pid + 1000} {
			kids := ""
			if i < len(children) {
				kids = children[i]
			}
			if err := os.WriteFile(dir+"/task/"+strconv.Itoa(task)+"/children", []byte(kids), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	proc(10, "D", "", "11 12 ") // a vfork parent: its second thread's child 12 stopped
	proc(11, "S")
	proc(12, "T")
	proc(20, "D", "21 ") // a wait for the disk, its child running
	proc(21, "R")
	proc(30, "S", "12 ") // asleep (wait4): its stopped child does not stop it
	proc(40, "t")
	proc(50, "Z")
	for _, c := range []struct {
		pid           int
		stopped, done bool
	}{
		{10, true, true}, {11, false, false}, {12, true, true}, {20, false, false}, {30, false, false},
		{40, true, true}, {50, false, true}, {60, false, true}, // 60: gone
	} {
		if got := Stopped(root, c.pid); got != c.stopped {
			t.Errorf("Stopped(%d) = %v, want %v", c.pid, got, c.stopped)
		}
		if got := StoppedOrGone(root, c.pid); got != c.done {
			t.Errorf("StoppedOrGone(%d) = %v, want %v", c.pid, got, c.done)
		}
	}

	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if Stopped("/proc", cmd.Process.Pid) {
		t.Fatal("a sleeping process is stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("wait for the stop: %v %v", ws, err)
	}
	if !Stopped("/proc", cmd.Process.Pid) {
		t.Fatal("a process stopped by SIGSTOP is not stopped")
	}
}
