package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"tpurun/launcher"
)

// Run launches a job and returns when every worker is gone: here two CPU workers of a shell program on this host
// (a world of one node). The report has one attempt per start of the workers, with one summary per rank; ExitCode
// maps the error to the exit code tpurun would exit with.
func ExampleRun() {
	spec := launcher.Spec{
		Program: []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && echo "rank $RANK of $WORLD_SIZE, master $MASTER_ADDR"; exit 0`},
		Devices: launcher.Devices{Device: "cpu", NProcs: 2},
		Output:  launcher.Output{Stdout: os.Stdout, Stderr: os.Stderr},
	}
	rep, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", launcher.ExitCode(err))
	for _, r := range rep.Attempts[0].Ranks {
		fmt.Printf("rank %d exited %d\n", r.Rank, r.ExitCode)
	}
	// Output:
	// [1] rank 1 of 2, master 127.0.0.1
	// exit code 0
	// rank 0 exited 0
	// rank 1 exited 0
}

// A job fails with the exit code of its first failed worker; errors.As finds that worker in the error. Here rank 1
// of two exits 7 and rank 0, which would run for a minute, is stopped at once.
func ExampleWorkerError() {
	spec := launcher.Spec{
		Program: []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && exit 7; exec sleep 60`},
		Devices: launcher.Devices{Device: "cpu", NProcs: 2},
	}
	rep, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", launcher.ExitCode(err), "reason", rep.Verdict.Reason)
	var we *launcher.WorkerError
	if errors.As(err, &we) {
		fmt.Printf("rank %d exited with code %d\n", we.Rank, we.ExitCode())
	}
	// Output:
	// exit code 7 reason failure
	// rank 1 exited with code 7
}

// A setting Run refuses before anything starts matches ErrConfig (exit 2), whichever layer checked it.
func ExampleErrConfig() {
	for _, d := range []launcher.Devices{{Device: "xpu"}, {Device: "cpu", NProcs: -3}} {
		_, err := launcher.Run(context.Background(), launcher.Spec{Program: []string{"true"}, Devices: d})
		fmt.Println(errors.Is(err, launcher.ErrConfig), launcher.ExitCode(err))
	}
	// Output:
	// true 2
	// true 2
}

// Observers learn of a job as it goes: here of each attempt and of the worker whose failure ends one. Rank 1
// fails in the first attempt; the job restarts (MaxRestarts) and the second attempt succeeds.
func ExampleObserverFunc() {
	spec := launcher.Spec{
		Program:     []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3; exit 0`},
		Devices:     launcher.Devices{Device: "cpu", NProcs: 2},
		MaxRestarts: 1,
		Observers: []launcher.Observer{launcher.ObserverFunc(func(e launcher.Event) {
			switch e.Kind {
			case launcher.AttemptStarted:
				fmt.Printf("attempt %d started\n", e.Attempt)
			case launcher.WorkerFailed:
				fmt.Printf("rank %d failed with exit code %d\n", e.Failure.Rank, e.Failure.ExitCode())
			case launcher.AttemptEnded:
				fmt.Printf("attempt %d ended: %s\n", e.Attempt, e.Ended.Verdict.Reason)
			}
		})},
	}
	_, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", launcher.ExitCode(err))
	// Output:
	// attempt 0 started
	// rank 1 failed with exit code 3
	// attempt 0 ended: failure
	// attempt 1 started
	// attempt 1 ended: done
	// exit code 0
}

// Function mode calls a Python function in every worker, fn(index, *args), and collects each return value into
// the results document, in replica order: here operator.mul(index, 10) in three CPU workers.
func ExampleFnSpec() {
	spec := launcher.Spec{
		Function: &launcher.FnSpec{Target: "operator:mul", ArgsJSON: "[10]"},
		Devices:  launcher.Devices{Device: "cpu", NProcs: 3},
	}
	rep, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", launcher.ExitCode(err), "ok", rep.Results.OK)
	for _, r := range rep.Results.Results {
		fmt.Printf("replica %d: %s\n", r.Replica, r.Value)
	}
	// Output:
	// exit code 0 ok true
	// replica 0: 0
	// replica 1: 10
	// replica 2: 20
}

// Plan shows what Run would start, without starting anything: every worker and the environment it would get.
func ExamplePlan() {
	d, err := launcher.Plan(context.Background(), launcher.Spec{
		Devices: launcher.Devices{Device: "cpu", NProcs: 2},
		RunID:   "job42",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range d.Workers {
		fmt.Println("rank", w.Rank, "RANK="+w.Env["RANK"], "WORLD_SIZE="+w.Env["WORLD_SIZE"], "TORCHELASTIC_RUN_ID="+w.Env["TORCHELASTIC_RUN_ID"])
	}
	// Output:
	// rank 0 RANK=0 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=job42
	// rank 1 RANK=1 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=job42
}
