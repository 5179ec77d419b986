// Package attempt owns one attempt of this node's workers and how it, and then the job, ended. The job fills a
// Runner once (what every attempt shares: the command, the outputs, the reaper, the sampler, the terminal, the
// controller) and runs each attempt with a Spec (its number, its plan, where results go); the Attempt it returns
// is the attempt's record (each rank's exit, usage, stderr tail and error file).
//
// Control (docs/CONTROL.md): the Controller (control.go) is the run's one stop controller, the only reader of
// signals and timers, and owns every reason to stop in every phase; the job asks it for the contexts of its own
// waits. An attempt's states are the Machine (machine.go: a pure value of Phases, Events and Actions); the
// supervisor (supervise.go) feeds it and carries out its actions on the controller's goroutine: signals, the grace
// timer, the sweep of what the workers leave (sweep.go), the drain of their pipes. The start is start.go (with
// arglimit.go and logfile.go; gc.go quiets the collector during a burst), the terminal terminal.go, the signal
// policy signals.go, live sampling sample.go, the process's reaper reaping.go. How an attempt ended is one Verdict
// (verdict.go), with the Cause of its stop, from which the exit code, the summary line and the root cause derive.
package attempt
