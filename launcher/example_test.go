package launcher_test

import (
	"context"
	"fmt"
	"os"

	"tpurun/launcher"
	"tpurun/launcher/failure"
	"tpurun/launcher/topology"
)

// Run launches a job and returns when every worker is gone: here two CPU workers of a shell program on this host
// (a world of one node). The report has one attempt per start of the group, with one summary per rank; the error,
// when there is one, maps to tpurun's exit code with failure.ExitCode.
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
