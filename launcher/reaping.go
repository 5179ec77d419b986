package launcher

import (
	"os"
	"sync"

	"go.uber.org/zap"

	"tpurun/launcher/proc"
)

// reaping is this process's reaper while Runs use it: started by the first Run that reaps, shared by the Runs in
// flight (a reaper waits for every child of the process: there is one or none) and closed when the last one ends.
var reaping struct {
	sync.Mutex
	rp     *proc.Reaper
	users  int
	setSub bool // this process became the child subreaper for rp, and stops being one when rp closes
}

// useReaper lends the process's reaper to a Run, starting it (and making this process the child subreaper, unless
// it is PID 1 or one already) when no Run holds it; release gives it back.
func useReaper(log *zap.Logger) (rp *proc.Reaper, release func(), err error) {
	reaping.Lock()
	defer reaping.Unlock()
	if reaping.rp == nil {
		set := os.Getpid() != 1 && !proc.IsSubreaper()
		if set {
			if err := proc.SetSubreaper(); err != nil {
				return nil, nil, err
			}
		}
		reaping.rp, reaping.setSub = proc.NewReaper(log), set
	}
	reaping.users++
	rp = reaping.rp
	return rp, sync.OnceFunc(func() {
		reaping.Lock()
		defer reaping.Unlock()
		if reaping.users--; reaping.users > 0 {
			return
		}
		rp.Close()
		if reaping.setSub {
			if err := proc.ClearSubreaper(); err != nil {
				log.Warn("could not stop being the child subreaper", zap.Error(err))
			}
		}
		reaping.rp = nil
	}), nil
}

// startReaping sets up what the job's Spec leaves to Run: the signals it catches (unless NoSignals) and the reaper
// (unless NoReaper; PID 1 always reaps). stop undoes both, once the job is over.
func (j *job) startReaping() (sigs <-chan os.Signal, stop func()) {
	var undo []func()
	sigs = j.spec.Signals
	if sigs == nil && !j.spec.NoSignals {
		var stopSigs func()
		sigs, stopSigs = NotifySignals()
		undo = append(undo, stopSigs)
	}
	if !j.spec.NoReaper || os.Getpid() == 1 {
		rp, release, err := useReaper(j.spec.Logger.Named("reaper"))
		if err != nil {
			j.spec.Logger.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		} else {
			j.reaper = rp
			undo = append(undo, release)
		}
	}
	return sigs, func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
}

// subtree is the reaper when the job may walk the whole subtree of this process (see Spec.SweepSubtree): it runs
// nothing but this job and is the reaper's only user. done ends the walk; no other Run takes the reaper meanwhile.
// nil: the job finds its processes by their environment.
func (j *job) subtree() (rp *proc.Reaper, done func()) {
	if j.reaper == nil || !j.spec.SweepSubtree {
		return nil, nil
	}
	reaping.Lock()
	if reaping.rp != j.reaper || reaping.users != 1 {
		reaping.Unlock()
		return nil, nil
	}
	return j.reaper, reaping.Unlock
}
