// Package stop owns why a run stops and how it ended: the run's one stop controller (docs/CONTROL.md: the only
// reader of its signals and timers, job control as one state, the contexts of the job's waits), the vocabulary of
// a stop (Reason, Cause) and of its end (Verdict), and the signal policy with the process-wide signal set-up
// (NotifySignals, HurryOnStop, ExitWithParent).
//
// It drives an attempt through the small Attempt interface, and does not own the job's generations
// (internal/job), the processes or the reaper (internal/proc), or the consoles it hurries (internal/console).
package stop
