package launcher_test

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"tpurun/internal/attempt"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/internal/topology"
	"tpurun/launcher"
)

// The embedder verb is a program that embeds the launcher: it runs two workers with Run and a Spec that opts into
// catching signals and reaping (Process.CatchSignals and Reap, as tpurun does; with Arg "zero", the zero Spec's
// way: neither), and exits with the job's exit code. Rank 0 leaves a hanging helper in a session of its own; rank
// 1 hangs.
func init() {
	testutil.Define(testutil.Verb{Name: "embedder", Spawns: []string{"childsetsid", "hang"}, Run: func(w *testutil.Worker) int {
		plan, err := topology.CPUPlan(2)
		if err != nil {
			return 99
		}
		env := testutil.Without(os.Environ(), testutil.EnvVerb+"=")
		spec := spec.Spec{
			Options: attempt.Options{
				Program: []string{testutil.Executable()},
				Env:     append(env, testutil.FakeRank(0, "childsetsid:0"), testutil.FakeRank(1, "hang")),
			},
			Plan:   plan,
			Stdout: io.Discard,
			Stderr: io.Discard,
		}
		spec.CatchSignals, spec.Reap = w.Arg != "zero", w.Arg != "zero"
		_, err = launcher.RunInternal(context.Background(), spec)
		return failure.ExitCode(err)
	}})
}

// TestCatchSignalsAndReap: SIGTERM to a program that runs a job catching signals and reaping stops the job (exit
// 143) and leaves no process of it running, the helper a worker left in a session of its own included. The same
// program with the zero Spec's settings (nothing process-wide) ends on the signal at once and leaves the helper
// running (which the test then kills): what the options are for. Not parallel: the test waits for its own
// children, which a Run of a parallel test would reap.
func TestCatchSignalsAndReap(t *testing.T) {
	for _, arg := range []string{"", "zero"} {
		t.Run("arg="+arg, func(t *testing.T) {
			dir := testutil.FakeDir(t)
			cmd := testutil.Command("embedder:" + arg)
			cmd.Env = append(cmd.Env, "FAKE_DIR="+dir)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitReady(t, dir, 2)
			pids := testutil.PIDs(t, dir) // the two workers and the helper
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := testutil.WaitExit(t, cmd)
			if arg == "" {
				if code != 143 {
					t.Fatalf("exit %d, want 143 (stopped by SIGTERM)", code)
				}
				testutil.AssertAllGone(t, dir, 3)
				return
			}
			if code != -1 {
				t.Fatalf("exit %d, want the program killed by SIGTERM (no signal caught)", code)
			}
			var alive []int
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) && !testutil.Dead(pid) {
					alive = append(alive, pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if len(alive) == 0 {
				t.Fatalf("no process of the job outlived the program with the zero Spec; this test shows nothing")
			}
			testutil.AssertAllGone(t, dir, 3)
		})
	}
}
