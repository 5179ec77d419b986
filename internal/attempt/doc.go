// Package attempt runs the attempts of this node's workers, one at a time, and keeps each one's record. The job
// fills a Runner once (what every attempt shares) and runs each attempt with a Spec; the Attempt it returns is the
// record: its stop.Verdict and each rank's exit, usage, stderr tail and error file.
//
// An attempt is a Machine (Phases, Events and Actions that a test can drive alone) and a supervisor that carries
// out its actions on the stop controller's goroutine: the start of the workers (commands, streams, log files,
// samples), signals and job control to their groups, the grace timer, the sweep and the drain of their pipes. The
// terminal whose input goes to local rank 0 is here too.
//
// It does not own the reasons to stop or the verdicts (internal/stop), the job's generations (internal/job), the
// processes and the reaper (internal/proc), or the consoles (internal/console).
package attempt
