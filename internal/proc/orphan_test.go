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
