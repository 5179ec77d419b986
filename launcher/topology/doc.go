// Package topology owns what a host has and what each worker must be told.
//
// It detects devices (environment, sysfs PCI scan, /dev nodes, the GCE metadata server) once per run, each value
// with its provenance, validates the requested split (nprocs, SPMD, chip subsets) and builds the Plan: one Worker per
// process with its rank, local rank, replicas and the complete per-rank environment that PyTorch/XLA, JAX and
// torchrun-style programs read. It reads the OS only through a root directory that tests replace.
//
// Files: source.go (Value/Source provenance), detect.go (Detect, Options, Host, the device choice), env.go (the
// slice as flags and env describe it), tpu.go (chips, device nodes, the finished slice), mdslice.go (the slice as
// the metadata server describes it), gpu.go (GPUs), sysfs.go (PCI scan, device nodes), metadata.go (the bounded,
// caching metadata client), accelerator.go and bounds.go (accelerator types and
// grids), parse.go (parsers of outside input), build.go (Request, NewPlan, Slice), ports.go (who holds a port),
// holders.go (who holds a device node or the libtpu lockfile), doctor.go and output.go (what people read),
// errors.go (sentinels and typed errors), plan.go (the Plan types shared with the launcher).
package topology
