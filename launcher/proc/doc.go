// Package proc owns the OS mechanics of supervision: starting a process in its own group with a parent-death
// signal, signalling whole groups, escalating SIGTERM to SIGKILL, sweeping for any process that still carries a
// run's id, and reaping orphans when tpurun is PID 1 or a subreaper.
package proc
