// Package topology owns what a host has and what each worker must be told.
//
// It detects devices (environment, sysfs PCI scan, /dev nodes, the GCE metadata server) once per run, each value
// with its provenance, validates the requested split (nprocs, SPMD, chip subsets) and builds the Plan: one Worker per
// process with its rank, local rank, replicas and the complete per-rank environment that PyTorch/XLA, JAX and
// torchrun-style programs read. It reads the OS only through a root directory that tests replace.
package topology
