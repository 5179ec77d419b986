// Package topology owns what a host has and what each worker must be told.
//
// It detects devices (environment, sysfs PCI scan, /dev nodes, the GCE metadata server through a bounded, caching
// client) once per run, each value with its provenance (Value, Source); validates the requested split (nprocs,
// SPMD, chip subsets) and builds the Plan: one Worker per process with its rank, local rank, replicas and the
// complete per-rank environment that PyTorch/XLA, JAX and torchrun-style programs read, for a world of one host or
// of several (World, the JobLayout a TPU slice or a batch scheduler describes). Each accelerator kind (Kind) owns
// its facts: detection, per-rank variables, device nodes. It also says who holds a device node, the libtpu lockfile
// or a TCP port, and the facts behind tpurun's choices between upstream behaviours (WorkerSkipMDS, TPUFacts). It
// reads the OS only through root directories that tests replace.
//
// It does not print: doctor's report and notes and plan's tables are the CLI's (cmd/tpurun/internal/hostview). It
// knows no rendezvous (the nodes' agreement is package rendezvous's) and no process (the workers' environment
// beyond the plan is package workerenv's). docs/TOPOLOGY.md says which upstream function each TPU variable follows.
package topology
