package stop

import (
	"os"
	"sync"
	"syscall"
	"time"
	"tpurun/internal/failure"
	"tpurun/internal/proc"

	"go.uber.org/zap"
)

// jobPhase is where the run stands with job control (docs/CONTROL.md, "Job control"): the controller's goroutine
// owns it; jobEvent is the one place it changes.
type jobPhase int

const (
	jobRunning  jobPhase = iota // no job-control stop under way: the workers run (unless stopped from outside)
	jobStopping                 // a stop signal came: the workers are being stopped; tpurun stops itself once they are (jobStopWait at most)
	jobHeld                     // tpurun as PID 1 cannot stop itself: the workers stay stopped until SIGCONT
	jobResuming                 // running again on a SIGCONT os/signal has yet to hand over: that one changes nothing once read
)

// jobEventKind is what happens to the run's job control.
type jobEventKind int

const (
	jobStopSignal jobEventKind = iota // SIGTSTP, SIGTTIN or SIGTTOU came
	jobContinue                       // SIGCONT came
	jobTick                           // a look at the workers, and at the latch (a SIGCONT os/signal has not told yet)
	jobCancel                         // a cause to stop the run or the attempt came: it resumes what job control stopped
)

// jobStopWait bounds how long a job-control stop waits for the workers to stop before tpurun stops itself: a worker
// that takes the signal (a handler, a blocked signal taken later) may never stop, and the shell waits for tpurun.
const jobStopWait = 5 * time.Second

// jobStopSettle is the least time between a stop signal read and tpurun's own stop: a SIGCONT sent before the stop
// signal was read (`kill -TSTP p; kill -CONT p`) escapes the latch, and os/signal may hand it over a moment later.
const jobStopSettle = 100 * time.Millisecond

// jobControl is the job-control state of a run. Its Stopper (made at the first job-control signal) tells what
// os/signal cannot, whether a SIGCONT came after a stop signal, and stops tpurun so that a SIGCONT sent at any
// moment before the stop cancels it.
type jobControl struct {
	phase    jobPhase
	sig      syscall.Signal // the stop signal being applied (stopping, held)
	deadline time.Time      // stopping: tpurun stops itself then, stopped workers or not
	settled  time.Time      // stopping: tpurun stops itself not before (jobStopSettle)
	ticker   *time.Ticker   // stopping, held: the looks at the workers and the latch
	stopper  *proc.Stopper  // nil until the first job-control signal, or when it could not be made
	broken   bool           // the Stopper could not be made: job-control stops are discarded

	mu       sync.Mutex
	held     chan struct{} // closed when the job runs again; nil while it runs
	starting int           // batches of workers being forked now (see StartGate)
}

// tick is the channel of the looks at the workers while a stop is under way, nil otherwise.
func (j *jobControl) tick() <-chan time.Time {
	if j.ticker == nil {
		return nil
	}
	return j.ticker.C
}

// jobEvent applies one job-control event: the transitions, in one place.
func (c *Controller) jobEvent(k jobEventKind, sig syscall.Signal) {
	j := &c.job
	switch j.phase {
	case jobRunning, jobResuming:
		switch {
		case k == jobStopSignal:
			c.beginJobStop(sig)
		case k == jobContinue && j.phase == jobResuming:
			j.phase = jobRunning // the SIGCONT the job resumed on, read late: the workers got theirs already
		case k == jobContinue:
			// Forwarded: the workers may have been stopped from outside. A stop signal read next that came before
			// this SIGCONT is discarded.
			c.endJobStop("", false)
		}
	case jobStopping, jobHeld:
		switch {
		case k == jobContinue:
			c.endJobStop("SIGCONT: the stop is over, every worker resumed", false)
		case k == jobCancel:
			c.endJobStop("stopping the run: the job-control stop is given up, every worker resumed", false)
		case k == jobTick && j.stopper.ContinueCame(): // the latch: a SIGCONT os/signal has not handed over yet
			c.endJobStop("SIGCONT: the stop is over, every worker resumed", true)
		case k == jobTick && j.phase == jobStopping:
			c.checkJobStop()
		}
	}
}

// beginJobStop: SIGTSTP, SIGTTIN or SIGTTOU stop every worker, then tpurun itself (checkJobStop); one sent before
// the latest SIGCONT is discarded, as the kernel discards a pending stop signal when SIGCONT comes.
func (c *Controller) beginJobStop(s syscall.Signal) {
	j := &c.job
	if c.cannotBeResumed(s) || !c.ensureStopper(s) {
		return
	}
	// A stop signal sent before the latest SIGCONT read (the latch watchStops set then saw none since): pending when
	// the job resumed (`stty tostop` output, a Ctrl-Z typed before fg), or read in the same instant, their order
	// lost. The continue wins, and nothing is left stopped.
	if !j.stopper.StopCame() {
		c.log.Debug("job control: " + failure.SignalName(s) + " discarded: a SIGCONT came after it (the last of a stop and a continue wins)")
		return
	}
	switch armed, err := j.stopper.WatchContinues(); {
	case err != nil:
		c.log.Warn("job control: "+failure.SignalName(s)+" discarded", zap.Error(err))
		return
	case !armed:
		c.log.Debug("job control: " + failure.SignalName(s) + " discarded: a SIGCONT is under way after it (the last of a stop and a continue wins)")
		return
	}
	j.mu.Lock()
	j.phase, j.sig, j.held = jobStopping, s, make(chan struct{})
	j.mu.Unlock()
	j.deadline, j.settled = time.Now().Add(jobStopWait), time.Now().Add(jobStopSettle)
	j.ticker = time.NewTicker(2 * time.Millisecond) // the stop takes as long as the workers' scheduling
	if c.att != nil {
		c.att.Signal(s)
	}
	c.jobEvent(jobTick, 0)
}

// ensureStopper makes the Stopper at the first job-control signal; without one a stop is discarded (and said so).
func (c *Controller) ensureStopper(s syscall.Signal) bool {
	if c.job.broken {
		c.log.Info("job control: " + failure.SignalName(s) + " discarded: tpurun cannot stop itself safely")
		return false
	}
	return c.haveStopper()
}

// haveStopper makes the Stopper unless it was made or could not be; it reports whether there is one.
func (c *Controller) haveStopper() bool {
	j := &c.job
	if j.stopper == nil && !j.broken {
		st, err := proc.NewStopper()
		if err != nil {
			j.broken = true
			c.log.Warn("job control: tpurun cannot stop itself safely: stop signals are discarded", zap.Error(err))
		}
		j.stopper = st
	}
	return j.stopper != nil
}

// watchStops sets the latch at a SIGCONT and once the job resumed (see beginJobStop).
func (c *Controller) watchStops() {
	if !c.haveStopper() {
		return
	}
	if _, err := c.job.stopper.WatchStops(); err != nil { // not armed: a stop signal under way, read next, counts
		c.log.Debug("job control: latch not set", zap.Error(err))
	}
}

// checkJobStop looks whether tpurun may stop itself now: every worker stopped (or gone), no worker being forked and
// the moment of jobStopSettle passed, or the wait is over.
func (c *Controller) checkJobStop() {
	j := &c.job
	j.mu.Lock()
	forking := j.starting > 0
	j.mu.Unlock()
	waited := !time.Now().Before(j.deadline)
	var left []int
	if c.att != nil {
		left = c.att.Unstopped(c.procRoot)
	}
	if !waited && (forking || len(left) > 0 || time.Now().Before(j.settled)) {
		return
	}
	if len(left) > 0 {
		c.log.Warn("job control: ranks still running after "+jobStopWait.String()+" (they take "+failure.SignalName(j.sig)+
			" themselves): stopping tpurun all the same; SIGCONT resumes the job, SIGTERM after it ends it", zap.Ints("ranks", left))
	}
	if c.att != nil {
		c.att.StopForegroundJobs()
	}
	c.stopSelf()
}

// stopSelf stops tpurun as a job-control stop, unless a SIGCONT came since the stop began (the Stopper's latch). As
// PID 1 it does not stop itself (the kernel would ignore it): the workers stay stopped until SIGCONT. A shell that
// died before the stop leaves nothing to resume the workers: they are resumed here.
func (c *Controller) stopSelf() {
	j := &c.job
	s := failure.SignalName(j.sig)
	if os.Getpid() == 1 {
		c.log.Warn("job control: " + s + " stopped the workers; as PID 1 tpurun cannot stop itself: SIGCONT resumes them")
		j.phase = jobHeld
		j.ticker.Reset(100 * time.Millisecond)
		return
	}
	c.log.Info("job control: " + s + " stopped the workers; stopping tpurun; SIGCONT resumes every worker")
	parentGone, err := j.stopper.Stop()
	switch {
	case err != nil:
		c.log.Warn("job control: tpurun could not stop itself; resuming the workers", zap.Error(err))
	case parentGone || proc.GroupOrphaned(c.procRoot, syscall.Getpgrp()):
		// The shell is gone: the job is hung up as the kernel hangs up a stopped group that loses its shell
		// (SIGHUP, then SIGCONT), whether the kernel's own SIGHUP reached tpurun or the stop raced the shell's exit.
		c.log.Warn("job control: the shell that started tpurun exited while the job stopped; SIGHUP and SIGCONT to every worker, " +
			"as the kernel does for a stopped job that loses its shell")
		if c.att != nil {
			c.att.Signal(syscall.SIGHUP)
		}
	}
	c.endJobStop("", true) // continued (or never stopped: a SIGCONT came first), before os/signal hands that SIGCONT over
}

// endJobStop ends a job-control stop: every worker resumed, the start of workers let go on, and the latch set so
// that a stop signal sent before now is discarded. unread: the SIGCONT behind it is still to be read from
// os/signal (before any stop signal sent after it: os/signal hands signals read together SIGCONT first).
func (c *Controller) endJobStop(why string, unread bool) {
	j := &c.job
	if why != "" {
		c.log.Info("job control: " + why)
	}
	phase := jobRunning
	if unread {
		phase = jobResuming
	}
	j.resume(phase)
	c.watchStops() // first: a stop signal sent once a resumed worker could be seen running counts
	if c.att != nil {
		c.att.Signal(syscall.SIGCONT)
	}
}

// JobStopping is the stop signal of a job-control stop under way or holding the workers, 0 while none: a worker
// handed to the attempt meanwhile is stopped with it. Only on the controller's goroutine.
func (c *Controller) JobStopping() syscall.Signal {
	if c.job.phase == jobStopping || c.job.phase == jobHeld {
		return c.job.sig
	}
	return 0
}

// StartGate is called before a batch of workers is forked: it waits while job control holds the job stopped (or
// until stop reports the attempt stopping), then counts the batch as being forked until done, so that tpurun does
// not stop itself before those workers are stopped.
func (c *Controller) StartGate(stop func() bool) (done func()) {
	j := &c.job
	for {
		j.mu.Lock()
		held := j.held
		if held == nil || stop() {
			j.starting++
			j.mu.Unlock()
			return func() {
				j.mu.Lock()
				j.starting--
				j.mu.Unlock()
			}
		}
		j.mu.Unlock()
		select {
		case <-held:
		case <-c.done:
			return func() {}
		}
	}
}

// closeJob releases what job control holds when the controller ends.
func (c *Controller) closeJob() {
	j := &c.job
	j.resume(jobRunning)
	if j.stopper != nil {
		j.stopper.Close()
	}
}

// resume ends the looks at the workers and lets the start of workers go on, in phase.
func (j *jobControl) resume(phase jobPhase) {
	if j.ticker != nil {
		j.ticker.Stop()
		j.ticker = nil
	}
	j.mu.Lock()
	j.phase = phase
	if j.held != nil {
		close(j.held)
		j.held = nil
	}
	j.mu.Unlock()
}

// cannotBeResumed reports (and logs) that a job-control stop by s is discarded because tpurun's process group is
// orphaned (it leads its session, or its shell has exited): nothing would ever send the SIGCONT, so tpurun does
// what the kernel does for such a group. As PID 1 (never stopped itself, as with tini) the workers stop all the same.
func (c *Controller) cannotBeResumed(s syscall.Signal) bool {
	if os.Getpid() == 1 || !proc.GroupOrphaned(c.procRoot, syscall.Getpgrp()) {
		return false
	}
	c.log.Warn("job control: " + failure.SignalName(s) + " ignored: tpurun's process group is orphaned (it leads its session, " +
		"or the shell that started it has exited), so nothing could resume the job; as the kernel does for an orphaned " +
		"group, the workers go on. Run tpurun from a shell with job control to stop and resume it (Ctrl-Z, fg)")
	return true
}
