// Package launcher owns a job: Run takes a Spec and runs it on this host alone or as one node of a multi-host
// world, and returns its Report. It detects the host once and checks everything that can be checked before a
// process starts (spec.go, validate.go, job.go), then runs generations (generation.go): join the world through the
// rendezvous (rendezvous.go), plan it, meet at a barrier, supervise one attempt of the local workers (attempt.go,
// start.go), collect their results (results.go), agree on the outcome with the other nodes (outcome.go), and
// restart the whole world after a failure while restarts are left.
//
// Control (docs/CONTROL.md): one stop controller per run (control.go) is the only reader of signals and timers
// and owns every reason to stop — a signal, --timeout, a failing rank, another node or the rendezvous store, a
// console write error, the caller's context — in every phase: the join, the barrier, the attempt, the exchange of
// outcomes, between generations. An attempt's states are package attempt's Machine (starting → running → stopping
// → killing → sweeping → draining → done); the supervisor (supervise.go) carries out its actions on the
// controller's goroutine: signals, the grace timer, the sweep of what the workers leave (sweep.go), the drain of
// their pipes. How an attempt and the job ended is one attempt.Verdict, from which the exit code
// (failure.ExitCode), the summary line and the root cause derive. The signal policy is signals.go; the terminal and
// stdin, terminal.go; the process's reaper and the signals a zero Spec's Run catches, reaping.go.
//
// Below it: the states of an attempt (attempt), the errors (failure) and their codes (exitcode), the consoles and
// the workers' pipes (console), the workers' environment (workerenv), detection and planning (topology), processes
// (proc), the result contract (results), --preload (zygote). Above it: the summaries (summary), the status endpoint
// (cmd/tpurun/internal/status), the command line (flags, cmd/tpurun).
package launcher
