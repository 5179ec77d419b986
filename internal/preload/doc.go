// Package preload runs the preloaded Python interpreter of `tpurun --preload MODULES` (a fork server; Android calls
// it a zygote): one process per host that imports the modules once, proves it holds no thread but its main one, no
// device node, no libtpu lockfile and no initialized CUDA/XLA/JAX runtime, and then forks one worker per request.
// Each worker is forked through an intermediate process that exits at once, so it is re-parented to tpurun (the
// child subreaper), which adopts it (proc.Reaper.AdoptHeld) and supervises it exactly like an exec'd worker. The
// worker's stdio and result channel are tpurun's pipes, passed over a Unix socket (SCM_RIGHTS); it runs its program
// only once tpurun has adopted it, with the per-rank environment, argv, sys.path[0] and __main__ of `python3 FILE`
// or `python3 -m MODULE`.
//
// Interpreter is one such process (Start, Fork); Preloader is the job's, an attempt's starter that starts it again
// should it die and reports what it refuses as a bad --preload setting. The Python side is embedded here
// (preload.py, which documents the control socket's messages, and pools.py) and run from a private directory; it
// needs nothing of the module tpurun but, in function mode, what the workers' PYTHONPATH holds.
//
// It does not own the environment the interpreter gets (workerenv.Shared) nor the workers' supervision (package
// proc and the attempt).
package preload
