package job

import (
	"os"

	"go.uber.org/zap"

	"tpurun/internal/proc"
	"tpurun/internal/stop"
)

// startReaping sets up what the job's Spec leaves to Run: the signals it catches (sigs nil, unless noSignals) and
// the reaper (unless noReaper; PID 1 always reaps). It returns the run's signals, the reaper lent to the run (nil
// without one) and undoAll, which undoes both once the job is over.
func startReaping(log *zap.Logger, sigs <-chan os.Signal, noSignals, noReaper bool) (_ <-chan os.Signal, rp *proc.Reaper, undoAll func()) {
	stopSigs, release := func() {}, func() {}
	if sigs == nil && !noSignals {
		sigs, stopSigs = stop.NotifySignals()
	}
	if !noReaper || os.Getpid() == 1 {
		r, rel, err := proc.LendReaper(log.Named("reaper"))
		if err != nil {
			log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		} else {
			rp, release = r, rel
		}
	}
	return sigs, rp, func() { release(); stopSigs() }
}
