package launcher

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

// sweep kills the orphans of the run. When the job may walk this process's subtree (the reaper's, see subtree)
// every orphan is in it, so it walks exactly that subtree; otherwise, or when the kernel cannot list children, it
// scans every process of the host for the run's sweep tag in its environment.
func (j *job) sweep() ([]int, error) {
	if rp, done := j.subtree(); rp != nil {
		swept, err := rp.Sweep(j.spec.ProcRoot)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return swept, err
		}
		j.log.Debug("subtree sweep unavailable, sweeping by environment", zap.Error(err))
	}
	return proc.Sweep(j.spec.ProcRoot, worker.EnvSweepTag, j.spec.SweepTag, syscall.SIGKILL, j.kept)
}

// termOutside sends SIGTERM once to every live process the workers left outside their own groups (a helper in a
// new session), found as the sweep finds them, and returns their pids.
func (j *job) termOutside(ws []*child) []int {
	groups := map[int]bool{}
	for _, wk := range ws {
		if wk.p != nil {
			groups[wk.p.PID()] = true
		}
	}
	inGroups := func(pid int) bool {
		pgid, err := syscall.Getpgid(pid)
		return groups[pid] || err != nil || groups[pgid] || j.kept(pid)
	}
	if rp, done := j.subtree(); rp != nil {
		hit, err := rp.SignalTree(j.spec.ProcRoot, inGroups, syscall.SIGTERM)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return hit
		}
	}
	pids, _ := proc.FindByEnv(j.spec.ProcRoot, worker.EnvSweepTag, j.spec.SweepTag)
	var hit []int
	for _, pid := range pids {
		if !inGroups(pid) && syscall.Kill(pid, syscall.SIGTERM) == nil {
			hit = append(hit, pid)
		}
	}
	return hit
}

// liveOrphans counts the processes of the run still alive once every worker has exited.
func (j *job) liveOrphans() int {
	if rp, done := j.subtree(); rp != nil {
		defer done()
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
			return rp.LiveDescendants(j.spec.ProcRoot, j.kept)
		}
	}
	pids, _ := proc.FindByEnv(j.spec.ProcRoot, worker.EnvSweepTag, j.spec.SweepTag)
	return len(slices.DeleteFunc(pids, j.kept))
}

// kept reports whether pid is a process of the job that outlives its attempts (the preloaded interpreter).
func (j *job) kept(pid int) bool {
	return j.reaper != nil && j.reaper.Kept(pid)
}

// killAndSweep sends SIGKILL to every group and sweeps the subtree; it returns the pids the sweep had to kill.
func (j *job) killAndSweep(ws []*child) []int {
	for _, wk := range ws {
		if wk.p != nil {
			_ = wk.p.Signal(syscall.SIGKILL)
		}
	}
	swept, err := j.sweep()
	if err != nil {
		j.log.Warn("orphan sweep incomplete", zap.Error(err))
	}
	if len(swept) > 0 {
		j.log.Warn("orphan sweep killed processes that outlived their worker group", zap.Ints("pids", swept))
	}
	return swept
}
