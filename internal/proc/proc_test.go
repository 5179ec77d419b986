package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// The test binary is also the child: testutil's fake worker, with this package's verbs (crash:42, and those
// defined here and beside the tests that use them).
func init() {
	testutil.Register("crash")
	testutil.Define(testutil.Verb{Name: "burn", Run: func(*testutil.Worker) int { // touch 64 MiB, exit 0
		b := make([]byte, 64<<20)
		for i := range b {
			b[i] = 1
		}
		return int(b[len(b)-1]) - 1
	}})
	testutil.Define(testutil.Verb{Name: "hangready", Run: func(*testutil.Worker) int { // ignore SIGHUP
		signal.Ignore(syscall.SIGHUP)
		fmt.Println("ready")
		select {}
	}})
}

func TestMain(m *testing.M) {
	testutil.Dispatch()
	os.Exit(testutil.Run(m))
}

// child is the test binary as a process doing verb.
func child(t *testing.T, verb string) *exec.Cmd {
	t.Helper()
	return testutil.Command(verb)
}

func TestStartExitCodeAndRusage(t *testing.T) {
	exited := make(chan int, 1)
	p, err := proc.Start(child(t, "crash:42"), func(p *proc.Process) { exited <- p.PID() })
	if err != nil {
		t.Fatal(err)
	}
	if pid := <-exited; pid != p.PID() {
		t.Fatalf("onExit got pid %d, want %d", pid, p.PID())
	}
	ex := p.Wait()
	if ex.ExitCode != 42 || ex.Signal != 0 || ex.ExitStatus() != 42 || ex.Success() {
		t.Fatalf("exit %+v, want code 42", ex)
	}
	p, err = proc.Start(child(t, "burn"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ex = p.Wait()
	if !ex.Success() || ex.MaxRSS < 64<<20 || ex.UserCPU+ex.SysCPU <= 0 || ex.Wall <= 0 {
		t.Fatalf("exit %+v: want success, peak RSS >= 64 MiB and CPU time from rusage", ex)
	}
}

func TestProcessLeadsItsGroupAndSignalKillsIt(t *testing.T) {
	cmd := child(t, "hangready")
	out, _ := cmd.StdoutPipe()
	p, err := proc.Start(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	pgid, err := syscall.Getpgid(p.PID())
	if err != nil || pgid != p.PID() {
		t.Fatalf("pgid %d (%v), want its own group %d", pgid, err, p.PID())
	}
	if err := p.Signal(syscall.SIGHUP); err != nil { // ignored by the child
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex := p.Wait(); ex.Signal != syscall.SIGTERM || ex.ExitStatus() != 143 {
		t.Fatalf("exit %+v, want SIGTERM (143)", ex)
	}
	if proc.Alive(p.PID()) {
		t.Fatalf("pid %d alive after Wait", p.PID())
	}
	if err := proc.SignalGroup(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatalf("signalling an empty group: %v, want nil", err)
	}
	if err := proc.SignalGroup(1, syscall.SIGKILL); err == nil {
		t.Fatal("SignalGroup(1) must refuse")
	}
}

func TestStartMissingProgram(t *testing.T) {
	_, err := proc.Start(exec.Command("/nonexistent/tpurun-worker"), nil)
	if !errors.Is(err, proc.ErrNotStarted) {
		t.Fatalf("err %v, want ErrNotStarted", err)
	}
}

func TestSweepFindsRealProcessByEnv(t *testing.T) {
	cmd := child(t, "hangready")
	cmd.Env = append(cmd.Env, "TPURUN_RUN_ID=sweep-test-1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	got, err := proc.Sweep("/proc", "TPURUN_RUN_ID", "sweep-test-1", syscall.SIGKILL, nil)
	if err != nil || !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("swept %v (%v), want [%d]", got, err, cmd.Process.Pid)
	}
	_ = cmd.Wait()
	if !cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("child was not killed: %v", cmd.ProcessState)
	}
	if _, err := proc.FindByEnv("/proc", "TPURUN_RUN_ID", ""); err == nil {
		t.Fatal("an empty value must be refused")
	}
}

func TestFindByEnvFakeTree(t *testing.T) {
	root := t.TempDir()
	for pid, environ := range map[string]string{
		"100":  "A=1\x00TPURUN_RUN_ID=abc\x00",
		"101":  "TPURUN_RUN_ID=abcd\x00",
		"102":  "XTPURUN_RUN_ID=abc",
		"103":  "TPURUN_RUN_ID=abc",
		"self": "TPURUN_RUN_ID=abc",
		"1":    "TPURUN_RUN_ID=abc",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "environ"), []byte(environ), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := proc.FindByEnv(root, "TPURUN_RUN_ID", "abc")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []int{100, 103}) {
		t.Fatalf("got %v %v, want [100 103]", got, err)
	}
	if _, err := proc.FindByEnv(filepath.Join(root, "missing"), "K", "v"); err == nil {
		t.Fatal("missing proc root: no error")
	}
}

func FuzzEnvironHas(f *testing.F) {
	for _, s := range []string{"", "\x00", "K=v", "K=v\x00", "\x00K=v\x00", "K=vv\x00K=v", "K=\x00", "=\x00\x00"} {
		f.Add([]byte(s), "K=v")
	}
	f.Fuzz(func(t *testing.T, environ []byte, kv string) {
		want := false
		for _, e := range bytesSplit(environ) {
			if e == kv {
				want = true
			}
		}
		if got := proc.EnvironHas(environ, []byte(kv)); got != want {
			t.Fatalf("EnvironHas(%q, %q) = %v, want %v", environ, kv, got, want)
		}
	})
}

func bytesSplit(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}
