// Command hello is the smallest tpurun worker: it prints the per-rank environment and the arguments it was given,
// reports a greeting as the result of each replica it owns (worker.Report), and exits 0.
package main

import (
	"fmt"
	"os"

	"tpurun/worker"
)

func main() {
	fmt.Printf("hello from rank %s of %s (local rank %s of %s, device %s)\n",
		os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("LOCAL_RANK"), os.Getenv("LOCAL_WORLD_SIZE"),
		os.Getenv("PJRT_DEVICE"))
	for _, k := range []string{"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TPURUN_REPLICAS", "OMP_NUM_THREADS"} {
		fmt.Printf("  %s=%s\n", k, os.Getenv(k))
	}
	if len(os.Args) > 1 {
		fmt.Printf("  args: %q\n", os.Args[1:])
	}
	if os.Getenv(worker.EnvResultFD) == "" {
		return // not under tpurun: nothing to report to
	}
	replicas, err := worker.Replicas()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	for _, r := range replicas {
		if err := worker.Report(r, map[string]string{"hello": "from rank " + os.Getenv("RANK")}); err != nil {
			fmt.Fprintln(os.Stderr, "hello:", err)
			os.Exit(1)
		}
	}
}
