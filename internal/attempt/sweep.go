package attempt

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"syscall"

	"go.uber.org/zap"

	"tpurun/internal/proc"
	"tpurun/worker"
)

// drain reads every pipe to EOF: with the subtree gone every write end is closed, unless a process outside it
// holds one (see console.Drain). Output is never dropped for a slow console; only a stop signal gives up on it.
func (r *Runner) drain(ws []*child) {
	for _, wk := range ws {
		wk.drain.Begin(r.DrainTimeout, wk.readers...)
	}
	for _, wk := range ws {
		wk.io.Wait()
	}
}

// sweep kills the orphans of the run. When the job may walk this process's subtree (the reaper's, see subtree)
// every orphan is in it, so it walks exactly that subtree; otherwise, or when the kernel cannot list children, it
// scans every process of the host for the run's sweep tag in its environment.
func (r *Runner) sweep() ([]int, error) {
	if rp, done := r.subtree(); rp != nil {
		swept, err := rp.Sweep(proc.Root)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return swept, err
		}
		r.Log.Debug("subtree sweep unavailable, sweeping by environment", zap.Error(err))
	}
	return proc.Sweep(proc.Root, worker.EnvSweepTag, r.SweepTag, syscall.SIGKILL, r.kept)
}

// termOutside sends SIGTERM once to every live process the workers left outside their own groups (a helper in a
// new session), found as the sweep finds them, and returns their pids.
func (r *Runner) termOutside(ws []*child) []int {
	groups := map[int]bool{}
	for _, wk := range ws {
		if wk.p != nil {
			groups[wk.p.PID()] = true
		}
	}
	inGroups := func(pid int) bool {
		pgid, err := syscall.Getpgid(pid)
		return groups[pid] || err != nil || groups[pgid] || r.kept(pid)
	}
	if rp, done := r.subtree(); rp != nil {
		hit, err := rp.SignalTree(proc.Root, inGroups, syscall.SIGTERM)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return hit
		}
	}
	hit, _ := proc.Sweep(proc.Root, worker.EnvSweepTag, r.SweepTag, syscall.SIGTERM, inGroups)
	return hit
}

// liveOrphans counts the processes of the run still alive once every worker has exited.
func (r *Runner) liveOrphans() int {
	if rp, done := r.subtree(); rp != nil {
		defer done()
		if _, err := os.Stat(proc.Root + "/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
			return rp.LiveDescendants(proc.Root, r.kept)
		}
	}
	pids, _ := proc.FindByEnv(proc.Root, worker.EnvSweepTag, r.SweepTag)
	return len(slices.DeleteFunc(pids, r.kept))
}

// kept reports whether pid is a process of the job that outlives its attempts (the preloaded interpreter).
func (r *Runner) kept(pid int) bool {
	return r.Reaper != nil && r.Reaper.Kept(pid)
}

// killAndSweep sends SIGKILL to every group and sweeps the subtree; it returns the pids the sweep had to kill.
func (r *Runner) killAndSweep(ws []*child) []int {
	for _, wk := range ws {
		if wk.p != nil {
			_ = wk.p.Signal(syscall.SIGKILL)
		}
	}
	swept, err := r.sweep()
	if err != nil {
		r.Log.Warn("orphan sweep incomplete", zap.Error(err))
	}
	if len(swept) > 0 {
		r.Log.Warn("orphan sweep killed processes that outlived their worker group", zap.Ints("pids", swept))
	}
	return swept
}

// subtree is the reaper when the job may walk the whole subtree of this process (see Spec.SweepSubtree): it runs
// nothing but this job, the only Run that uses the reaper (proc.Alone). done ends the walk; no other Run takes the
// reaper meanwhile. nil: the job finds its processes by their environment.
func (r *Runner) subtree() (rp *proc.Reaper, done func()) {
	if r.Reaper == nil || !r.SweepSubtree {
		return nil, nil
	}
	if done, ok := proc.Alone(r.Reaper); ok {
		return r.Reaper, done
	}
	return nil, nil
}
