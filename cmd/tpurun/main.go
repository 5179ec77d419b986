// Command tpurun starts one worker process per device on this host with the per-rank environment that
// torchrun, PyTorch/XLA and JAX programs expect, supervises them and exits with the first failure's code.
//
//	tpurun [flags] [--] PROGRAM [ARGS...]
//
// The default build links the tcp and static rendezvous; built with -tags etcd it also links the etcd backend and
// is installed as tpurun-etcd beside tpurun, which runs it in its own place for a run on etcd.
package main

import (
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommand runs `tpurun plan` and `tpurun doctor`; ok is false when args name neither (a program named plan
// still runs as `tpurun -- plan`).
func subcommand(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "plan":
		return planCmd(args[1:], stdout, stderr), true
	case "doctor":
		return doctorCmd(args[1:], stdout, stderr), true
	case "help":
		return helpCmd(args[1:], stdout, stderr), true
	}
	return 0, false
}
