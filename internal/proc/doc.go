// Package proc owns the OS mechanics of supervision: starting a process in its own group with a parent-death
// signal, signalling whole groups, escalating SIGTERM to SIGKILL, sweeping for any process that still carries a
// run's id, and reaping orphans when tpurun is PID 1 or a subreaper. Under a Reaper, starting and reaping cost the
// same per process however many run: they are forked by threads whose descriptor tables hold none of the
// launcher's files (spawn.go), and each exit is one pidfd event (exits.go). How a process ended is one value, Exit
// (exit.go), that every layer above holds instead of copying its fields.
package proc
