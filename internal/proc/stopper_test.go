package proc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

func init() {
	// stopper: a Stopper driven by lines on stdin, one answer line each: "stops" (WatchStops), "stopcame",
	// "conts" (WatchContinues), "contcame", "stop" (Stop, answered once it returns). SIGTSTP, SIGTTIN and SIGCONT are caught,
	// as tpurun catches them.
	testutil.Define(testutil.Verb{Name: "stopper", Run: func(*testutil.Worker) int {
		signal.Ignore(syscall.SIGHUP)
		signal.Notify(make(chan os.Signal, 8), syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGCONT)
		s, err := proc.NewStopper()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer s.Close()
		fmt.Println("ready")
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "stops":
				armed, err := s.WatchStops()
				fmt.Printf("armed %v %v\n", armed, err)
			case "conts":
				armed, err := s.WatchContinues()
				fmt.Printf("armed %v %v\n", armed, err)
			case "stopcame":
				fmt.Printf("stopcame %v\n", s.StopCame())
			case "contcame":
				fmt.Printf("contcame %v\n", s.ContinueCame())
			case "stop":
				gone, err := s.Stop()
				fmt.Printf("resumed %v %v\n", gone, err)
			}
		}
		return 0
	}})
}

// TestStopper: the latch is the kernel's record of the last of a stop and a continue sent to the process, which
// os/signal cannot give: a stop signal clears WatchStops' latch and a SIGCONT does not; a SIGCONT clears
// WatchContinues' latch, and a Stop after it returns at once (the SIGCONT came after the stop was decided: it wins);
// with no SIGCONT, Stop stops the process (a job of this test's session) until one comes.
func TestStopper(t *testing.T) {
	cmd := testutil.Command("stopper")
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	said := "ready\n"
	out.WaitFor(t, said)
	ask := func(q, want string) {
		t.Helper()
		if _, err := fmt.Fprintln(w, q); err != nil {
			t.Fatal(err)
		}
		said += want + "\n"
		out.WaitFor(t, said)
	}
	kill := func(s syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(pid, s); err != nil {
			t.Fatal(err)
		}
	}
	ask("stops", "armed true <nil>")
	ask("stopcame", "stopcame false")
	kill(syscall.SIGCONT)
	ask("stopcame", "stopcame false") // a continue leaves a watch of stops as it is
	kill(syscall.SIGTSTP)
	ask("stopcame", "stopcame true")
	ask("conts", "armed true <nil>")
	ask("contcame", "contcame false")
	kill(syscall.SIGTTIN)
	ask("contcame", "contcame false")
	kill(syscall.SIGCONT)
	ask("contcame", "contcame true")
	ask("stop", "resumed false <nil>") // the SIGCONT came after the watch: no stop
	ask("conts", "armed true <nil>")
	if _, err := fmt.Fprintln(w, "stop"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the process stopped", func() error {
		if st := procState(pid); st != "T" {
			return fmt.Errorf("state %q", st)
		}
		return nil
	})
	kill(syscall.SIGCONT)
	said += "resumed false <nil>\n"
	out.WaitFor(t, said)
}
