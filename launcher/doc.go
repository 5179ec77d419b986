// Package launcher runs distributed training jobs from a Go program, as the tpurun command does: Run takes a Spec
// (the program, the devices of this host and how to split them, the rendezvous with other hosts, the output, the
// result contract) and runs the job on this host alone or as one node of a multi-host world, restarting the world
// after a failure, and returns its Report; Observers learn of its progress as Events. Plan is the dry run: the
// workers and the environment each would get, without starting anything. ExitCode maps Run's error to the exit code
// the tpurun command uses, and the errors a caller branches on are ErrConfig, ErrTimeout, ErrRendezvous,
// ErrResults, ErrNotFound, *WorkerError and the context's own.
//
// By default Run changes nothing process-wide: Spec.Process opts into catching signals and reaping. The rendezvous
// backends are packages of their own (rendezvous/tcp, rendezvous/etcd, imported for their side effect); a Go worker
// reports its results with package worker.
package launcher
