// Package zygote runs the preloaded Python interpreter of `tpurun --preload MODULES`: one process per host that
// imports the modules once, proves it holds no thread but its main one, no device node, no libtpu lockfile and no
// initialized CUDA/XLA/JAX runtime, and then forks one worker per request. Each worker is forked through an
// intermediate process that exits at once, so it is re-parented to tpurun (the child subreaper), which adopts it
// (proc.Reaper.AdoptHeld) and supervises it exactly like an exec'd worker. The worker's stdio and result channel
// are tpurun's pipes, passed over a Unix socket (SCM_RIGHTS); it runs its program only once tpurun has adopted it,
// with the per-rank environment, argv, sys.path[0] and __main__ of `python3 FILE` or `python3 -m MODULE`.
//
// The Python side is worker/python/tpurun/_zygote.py, which documents the wire messages.
package zygote
