package main

import (
	"os"
	"tpurun/internal/proc"
	"tpurun/internal/stop"

	"go.uber.org/zap"
)

// claimProcess sets up what tpurun, a process of its own, turns on for its whole life before it writes anything:
// every catchable signal caught (sigs, for the Spec).
func claimProcess(o *options) (sigs <-chan os.Signal) {
	// Every catchable signal, forwarded or acted on, never a dump; caught here, before tpurun writes anything or
	// answers on --status-addr (a signal meanwhile waits for Run, which stops at once), not by Run, and never
	// released (the process exits after the last flush): after the run a stop signal still bounds the last writes,
	// a closed stdout is still EPIPE, not SIGPIPE, and no signal kills tpurun by its default action. Releasing them
	// cost as much as catching them: a round trip to the runtime's signal thread each, 1.4 ms of a run of one worker.
	sigs, _ = stop.NotifySignals()
	return sigs
}

// reap makes tpurun reap for the whole run (PID 1 always does, the child subreaper unless --no-subreaper), as Run
// would for its own length; stop is nil when tpurun does not reap, or cannot (then the sweep goes by environment).
func (o *options) reap(log *zap.Logger) (stop func()) {
	if o.tr.noReaper && os.Getpid() != 1 {
		return nil
	}
	stop, err := proc.Reap(log.Named("reaper"))
	if err != nil {
		log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		o.spec.Reap = false
	}
	return stop
}
