// Command hello is the smallest tpurun worker: it prints the per-rank environment it was given and exits 0.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("hello from rank %s of %s (local rank %s of %s, device %s)\n",
		os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("LOCAL_RANK"), os.Getenv("LOCAL_WORLD_SIZE"),
		os.Getenv("PJRT_DEVICE"))
	for _, k := range []string{"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TPURUN_REPLICAS", "OMP_NUM_THREADS"} {
		fmt.Printf("  %s=%s\n", k, os.Getenv(k))
	}
}
