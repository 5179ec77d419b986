package proc

import (
	"cmp"
	"os"
	"sync"

	"go.uber.org/zap"
)

// reaping is this process's reaper while it is in use: started by the first Run that reaps (or by Reap), shared
// by the Runs in flight (a reaper waits for every child of the process: there is one or none), closed when the
// last user is done.
var reaping struct {
	sync.Mutex
	rp      *Reaper
	runs    int  // the Runs using rp: the subtree is a Run's to walk only while it is the only one
	holders int  // the callers of Reap keeping rp
	setSub  bool // this process became the child subreaper for rp, and stops being one when rp closes
}

// Reap makes this process reap its orphans until stop is called: it becomes the child subreaper (PID 1 reaps
// anyway) and starts the reaper that the Runs of the process share (see the Spec's NoReaper). Run does this itself for
// as long as it runs; Reap keeps the reaper beyond one Run: across several, or until the program's last words
// (tpurun's last line comes before the reaper's count of the orphans it reaped). It fails when the process cannot
// become the subreaper.
func Reap(log *zap.Logger) (stop func(), err error) {
	_, stop, err = useReaper(log, &reaping.holders)
	return stop, err
}

// useReaper lends the process's reaper to a user counted in count, starting it (and making this process the child
// subreaper, unless it is PID 1 or one already) when nobody holds it; release gives it back.
func useReaper(log *zap.Logger, count *int) (rp *Reaper, release func(), err error) {
	log = cmp.Or(log, zap.NewNop())
	reaping.Lock()
	defer reaping.Unlock()
	if reaping.rp == nil {
		set := os.Getpid() != 1 && !IsSubreaper()
		if set {
			if err := SetSubreaper(); err != nil {
				return nil, nil, err
			}
		}
		reaping.rp, reaping.setSub = NewReaper(log), set
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
			if err := ClearSubreaper(); err != nil {
				log.Warn("could not stop being the child subreaper", zap.Error(err))
			}
		}
		reaping.rp = nil
	}), nil
}

// LendReaper lends the process's reaper to one Run for as long as it runs, starting it (and making this process the
// child subreaper, unless it is PID 1 or one already) when nobody holds it; release gives it back. It fails when the
// process cannot become the subreaper.
func LendReaper(log *zap.Logger) (rp *Reaper, release func(), err error) {
	return useReaper(log, &reaping.runs)
}

// Alone locks rp for a walk of this process's whole subtree when rp is the process's reaper and one Run alone uses
// it: done ends the walk, and no other Run takes the reaper meanwhile. ok is false otherwise (done is nil).
func Alone(rp *Reaper) (done func(), ok bool) {
	reaping.Lock()
	if rp == nil || reaping.rp != rp || reaping.runs != 1 {
		reaping.Unlock()
		return nil, false
	}
	return reaping.Unlock, true
}
