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
	var undo []func()
	if sigs == nil && !noSignals {
		var stopSigs func()
		sigs, stopSigs = stop.NotifySignals()
		undo = append(undo, stopSigs)
	}
	if !noReaper || os.Getpid() == 1 {
		r, release, err := proc.LendReaper(log.Named("reaper"))
		if err != nil {
			log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		} else {
			rp = r
			undo = append(undo, release)
		}
	}
	return sigs, rp, func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
}
