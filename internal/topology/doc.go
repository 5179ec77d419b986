// Package topology owns what a host has and what each worker must be told.
//
// It detects devices (environment, sysfs PCI scan, /dev nodes, the GCE metadata server) once per run, each value
// with its provenance, validates the requested split (nprocs, SPMD, chip subsets) and builds the Plan: one Worker per
// process with its rank, local rank, replicas and the complete per-rank environment that PyTorch/XLA, JAX and
// torchrun-style programs read. It reads the OS only through a root directory that tests replace.
//
// Files, along a run: detect.go (Device, the Kind interface and its registry: the one place that looks kinds up;
// PerRankEnv and DeviceNodeGlobs, gathered from the kinds; the CPU kind, the default when nothing else is found; then
// Detect, Options, Host: what every kind's host has, the kind's state behind it, the device choice; Value/Source
// provenance; the PCI functions of the host and numbered device nodes, what each kind picks its own from; where a host
// sits among the job's nodes; who holds a device node or the libtpu lockfile), one file per accelerator kind that
// registers it and owns its facts: its state on the Host, its PCI matching, its per-rank variables, its device nodes
// (gpu.go with GPU detection and plan; tpu.go with the one TPU table, tpuTable, and the libtpu lockfile path), plan.go
// (the Plan types shared with the launcher, Request, NewPlan, JAX's env, worlds of several nodes, the port check, the
// job's layout as detection read it). Beside the run's path: env.go (the slice as flags and env describe it), chips.go
// (TPU chips, device nodes, the finished slice), mdslice.go (the slice as the metadata server describes it),
// metadata.go (the bounded, caching metadata client), accelerator.go and bounds.go (accelerator types and grids),
// parse.go (parsers of outside input), split.go (Host.Slice: the request against the host, and whether workers read
// metadata or env), slice.go (Slice.Plan: every TPU worker's env), ports.go (who holds a port), doctor.go, explain.go
// and output.go (what people read), errors.go (sentinels and typed errors).
// docs/TOPOLOGY.md says which upstream function each TPU variable follows; upstream_model_test.go models those
// functions and fidelity_test.go compares.
package topology
