// Package attempt runs the attempts of this node's workers, one at a time, and keeps each one's record. The job
// fills a Runner once (what every attempt shares: the command, the outputs, the reaper, the sampler, the terminal,
// the stop controller) and runs each attempt with a Spec (its number, its plan, where results go); the Attempt it
// returns is the attempt's record: its stop.Verdict and each rank's exit, usage, stderr tail and error file.
//
// An attempt is a Machine, a value of Phases, Events and Actions that a test can drive alone, and a supervisor
// that feeds it and carries out its actions on the stop controller's goroutine: the start of the workers (their
// commands, streams, log files and live samples), signals and job control to their groups, the grace timer, the
// sweep of what they leave behind and the drain of their pipes. The terminal whose input goes to local rank 0 is
// here too.
//
// It does not own the reasons to stop or the verdicts' vocabulary (internal/stop: the controller the supervisor
// attaches to, the signal policy), the job's generations and the world's outcome (internal/job), the processes'
// primitives and the reaper (internal/proc), or the consoles (internal/console).
package attempt
