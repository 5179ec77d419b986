package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"tpurun/internal/testutil"
)

// threadParent is a Python program that starts ARGV (tpurun) from a thread, as a ThreadPoolExecutor's worker or a
// Ray actor's method thread does: the thread waits until the workers are ready (tpurun has armed
// --exit-with-parent long before), exits, and the process waits until the kernel has removed the thread
// (/proc/self/task/TID gone: whatever its exit sends has been sent), writes $FAKE_DIR/thread-gone, then waits for
// tpurun and exits with its code.
const threadParent = `
import os, subprocess, sys, threading, time
d = os.environ["FAKE_DIR"]
box = {}
def start():
    box["tid"] = threading.get_native_id()
    box["p"] = subprocess.Popen(sys.argv[1:])
    while len(os.listdir(os.path.join(d, "ready"))) < 2:
        time.sleep(0.01)
t = threading.Thread(target=start)
t.start()
t.join()
while os.path.exists("/proc/self/task/%d" % box["tid"]):
    time.sleep(0.01)
open(os.path.join(d, "thread-gone"), "w").close()
sys.exit(box["p"].wait())
`

// startThreadParent runs threadParent with tpurun --exit-with-parent over two workers doing verb, and waits until
// the thread that started tpurun is gone.
func startThreadParent(t *testing.T, dir, verb string) *exec.Cmd {
	t.Helper()
	py := testutil.Need(t, "python3")
	caller := exec.Command(py, "-c", threadParent, filepath.Join(bin, "tpurun"), "--exit-with-parent", "--nprocs", "2", "--",
		testutil.Program(t))
	caller.Env = append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake(verb))
	caller.Stdout, caller.Stderr = os.Stdout, os.Stderr
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForFile(t, filepath.Join(dir, "thread-gone"))
	return caller
}

// TestExitWithParentThreadExits: the thread that started tpurun exits while its process lives. The parent is the
// process: the workers run on, and tpurun exits 0 when they do (with PR_SET_PDEATHSIG alone, the thread's exit
// sent SIGTERM: exit 143).
func TestExitWithParentThreadExits(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	caller := startThreadParent(t, dir, "exitongo")
	testutil.Go(t, dir)
	if err := caller.Wait(); err != nil {
		t.Fatalf("tpurun (through its parent) after the thread that started it exited: %v, want exit 0", err)
	}
	assertNothingLeft(t, dir, 2)
}

// TestExitWithParentProcessDiesAfterThread: after the thread that started tpurun exited, the process itself is
// killed: tpurun still stops its workers and exits.
func TestExitWithParentProcessDiesAfterThread(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	killCaller(t, dir, startThreadParent(t, dir, "hang"))
}

// killCaller kills caller, the process that started a tpurun --exit-with-parent whose 2 workers (of the fake
// worker program, in FAKE_DIR dir) are ready, and waits until nothing of the run is left and tpurun has exited (it
// comes back to this test binary, the subreaper, to be reaped).
func killCaller(t *testing.T, dir string, caller *exec.Cmd) {
	t.Helper()
	ws := testutil.PIDs(t, dir)
	target := testutil.Watch(t, parentOf(ws[0])) // tpurun: the workers' parent
	if err := caller.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = caller.Wait()
	assertNothingLeft(t, dir, 2)
	target.WaitExited(t, "tpurun to exit", func(left []int) string { return signalState(left[0]) })
}
