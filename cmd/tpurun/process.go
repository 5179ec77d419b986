package main

import (
	"os"
	"tpurun/internal/proc"

	"go.uber.org/zap"
)

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
