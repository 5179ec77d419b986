package attempt

import (
	"cmp"
	"os"
	"sync"

	"go.uber.org/zap"

	"tpurun/internal/proc"
)

// reaping is this process's reaper while it is in use: started by the first Run that reaps (or by Reap), shared
// by the Runs in flight (a reaper waits for every child of the process: there is one or none), closed when the
// last user is done.
var reaping struct {
	sync.Mutex
	rp      *proc.Reaper
	runs    int  // the Runs using rp: the subtree is a Run's to walk only while it is the only one
	holders int  // the callers of Reap keeping rp
	setSub  bool // this process became the child subreaper for rp, and stops being one when rp closes
}

// Reap makes this process reap its orphans until stop is called: it becomes the child subreaper (PID 1 reaps
// anyway) and starts the reaper that the Runs of the process share (see Spec.NoReaper). Run does this itself for
// as long as it runs; Reap keeps the reaper beyond one Run: across several, or until the program's last words
// (tpurun's last line comes before the reaper's count of the orphans it reaped). It fails when the process cannot
// become the subreaper.
func Reap(log *zap.Logger) (stop func(), err error) {
	_, stop, err = useReaper(log, &reaping.holders)
	return stop, err
}

// useReaper lends the process's reaper to a user counted in count, starting it (and making this process the child
// subreaper, unless it is PID 1 or one already) when nobody holds it; release gives it back.
func useReaper(log *zap.Logger, count *int) (rp *proc.Reaper, release func(), err error) {
	log = cmp.Or(log, zap.NewNop())
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
	*count++
	rp = reaping.rp
	return rp, sync.OnceFunc(func() {
		reaping.Lock()
		defer reaping.Unlock()
		if *count--; reaping.runs+reaping.holders > 0 {
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

// StartReaping sets up what the job's Spec leaves to Run: the signals it catches (sigs nil, unless noSignals) and
// the reaper (unless noReaper; PID 1 always reaps). It returns the run's signals, the reaper lent to the run (nil
// without one) and stop, which undoes both once the job is over.
func StartReaping(log *zap.Logger, sigs <-chan os.Signal, noSignals, noReaper bool) (_ <-chan os.Signal, rp *proc.Reaper, stop func()) {
	var undo []func()
	if sigs == nil && !noSignals {
		var stopSigs func()
		sigs, stopSigs = NotifySignals()
		undo = append(undo, stopSigs)
	}
	if !noReaper || os.Getpid() == 1 {
		r, release, err := useReaper(log.Named("reaper"), &reaping.runs)
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

// subtree is the reaper when the job may walk the whole subtree of this process (see Spec.SweepSubtree): it runs
// nothing but this job, the only Run that uses the reaper. done ends the walk; no other Run takes the reaper meanwhile.
// nil: the job finds its processes by their environment.
func (r *Runner) subtree() (rp *proc.Reaper, done func()) {
	if r.Reaper == nil || !r.SweepSubtree {
		return nil, nil
	}
	reaping.Lock()
	if reaping.rp != r.Reaper || reaping.runs != 1 {
		reaping.Unlock()
		return nil, nil
	}
	return r.Reaper, reaping.Unlock
}
