package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"tpurun/internal/failure"
	"tpurun/internal/stop"
	"tpurun/internal/testutil"
	"tpurun/internal/topology"
	"tpurun/launcher"
)

// Run launches a job and returns when every worker is gone: here two CPU workers of a shell program on this host
// (a world of one node). The report has one attempt per start of the group, with one summary per rank; the error,
// when there is one, maps to tpurun's exit code with failure.ExitCode. The zero Spec's signals and reaping are on:
// a SIGTERM to this program meanwhile would stop the job, not end the program.
func ExampleRun() {
	spec := launcher.Spec{
		Program: []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && echo "rank $RANK of $WORLD_SIZE, master $MASTER_ADDR"; exit 0`},
		Detect:  topology.Options{Device: "cpu"},
		Request: topology.Request{NProcs: 2},
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	}
	rep, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", failure.ExitCode(err))
	for _, r := range rep.Attempts[0].Ranks {
		fmt.Printf("rank %d exited %d\n", r.Rank, r.ExitCode)
	}
	// Output:
	// [1] rank 1 of 2, master 127.0.0.1
	// exit code 0
	// rank 0 exited 0
	// rank 1 exited 0
}

// A job fails with the exit code of its first failed worker; the error Run returns is the job's verdict, and
// errors.As finds the worker behind it. Here rank 1 of two exits 7 and rank 0, which would run for a minute, is
// stopped at once.
func ExampleRun_exitCode() {
	spec := launcher.Spec{
		Program: []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && exit 7; exec sleep 60`},
		Detect:  topology.Options{Device: "cpu"},
		Request: topology.Request{NProcs: 2},
	}
	_, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", failure.ExitCode(err))
	var v *stop.Verdict
	if errors.As(err, &v) {
		fmt.Println("reason", v.Reason)
	}
	var we *failure.WorkerError
	if errors.As(err, &we) {
		fmt.Printf("rank %d exited with code %d\n", we.Rank, we.ExitCode)
	}
	// Output:
	// exit code 7
	// reason failure
	// rank 1 exited with code 7
}

// Observers learn of a job as it goes: here of each attempt and of the worker whose failure ends one. Rank 1
// fails in the first attempt; the job restarts (MaxRestarts) and the second attempt succeeds.
func ExampleObserverFunc() {
	spec := launcher.Spec{
		Program:     []string{"/bin/sh", "-c", `[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3; exit 0`},
		Detect:      topology.Options{Device: "cpu"},
		Request:     topology.Request{NProcs: 2},
		MaxRestarts: 1,
		Observers: []launcher.Observer{launcher.ObserverFunc(func(e launcher.Event) {
			switch e.Kind {
			case launcher.AttemptStarted:
				fmt.Printf("attempt %d started\n", e.Attempt)
			case launcher.WorkerFailed:
				fmt.Printf("rank %d failed with exit code %d\n", e.Failure.Rank, e.Failure.ExitCode)
			case launcher.AttemptEnded:
				fmt.Printf("attempt %d ended: %s\n", e.Attempt, e.Ended.Verdict.Reason)
			}
		})},
	}
	_, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", failure.ExitCode(err))
	// Output:
	// attempt 0 started
	// rank 1 failed with exit code 3
	// attempt 0 ended: failure
	// attempt 1 started
	// attempt 1 ended: done
	// exit code 0
}

// Every worker reports one result per replica it owns through its result channel (package worker: a Go worker
// here, this test binary; tpurun.report in Python); with Results.Required a replica that reports nothing fails
// the job (exit 65). The report's results document holds every replica's value, in replica order.
func ExampleResultsSpec() {
	spec := launcher.Spec{
		Program: []string{os.Args[0]},
		Env:     append(os.Environ(), testutil.Fake("report")),
		Detect:  topology.Options{Device: "cpu"},
		Request: topology.Request{NProcs: 3},
		Results: launcher.ResultsSpec{Required: true},
	}
	rep, err := launcher.Run(context.Background(), spec)
	fmt.Println("exit code", failure.ExitCode(err), "ok", rep.Results.OK)
	for _, r := range rep.Results.Results {
		fmt.Printf("replica %d (rank %d): %s\n", r.Replica, r.Rank, r.Value)
	}
	// Output:
	// exit code 0 ok true
	// replica 0 (rank 0): {"lang":"go","rank":0,"replica":0,"sq":0}
	// replica 1 (rank 1): {"lang":"go","rank":1,"replica":1,"sq":1}
	// replica 2 (rank 2): {"lang":"go","rank":2,"replica":2,"sq":4}
}
