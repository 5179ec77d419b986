// Package stop owns why a run stops and how it ended: the run's one stop controller (docs/CONTROL.md: the only
// reader of its signals and timers, every reason to stop in every phase, job control as one state, the contexts of
// the job's waits), the vocabulary of a stop (Reason, Cause) and of its end (Verdict, with its exit code and summary
// line), and the signal policy with the process-wide signal set-up the CLI asks for (NotifySignals, HurryOnStop,
// ExitWithParent).
//
// It does not own an attempt: it drives the attached one through the small Attempt interface that
// internal/attempt's supervisor implements. It does not own the job's generations (internal/job), the processes'
// primitives or the reaper (internal/proc), or the consoles it hurries (internal/console).
package stop
