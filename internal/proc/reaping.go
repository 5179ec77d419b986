package proc

import (
	"cmp"
	"os"
	"sync"

	"go.uber.org/zap"
)

// reaping is this process's one reaper while it is in use: started by its first user (a Run or Reap), closed when
// the last is done.
var reaping struct {
	sync.Mutex
	rp      *Reaper
	runs    int  // the Runs using rp: the subtree is a Run's to walk only while it is the only one
	holders int  // the callers of Reap keeping rp
	setSub  bool // this process became the child subreaper for rp, and stops being one when rp closes
}

// Reap makes this process the child subreaper and starts the reaper its Runs share, until stop is called: beyond
// one Run (which lends it for as long as it runs), until the program's last words. It fails when the process cannot
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
