package launcher

import (
	"context"

	"tpurun/internal/job"
	"tpurun/internal/pymodule"
	"tpurun/internal/spec"
)

// Version is tpurun's version: the embedded Python module's __version__, so that the binary, the Python module
// and the wheel always agree.
var Version = pymodule.Version()

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to s.MaxRestarts times. A single host is a world of one.
//
// By default Run waits only for the processes it starts, each alone (by pidfd, as exec.Cmd.Wait does), and changes
// nothing process-wide; Spec.Process turns on what tpurun's command line uses (catching signals, reaping).
//
// ctx bounds the job: when it is canceled or its deadline passes, the workers are stopped (SIGTERM, then SIGKILL
// after Spec.Grace) and the error has context.Canceled or context.DeadlineExceeded in its chain.
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise ExitCode gives its exit
// code, errors.As finds the *WorkerError of the first failed worker, and errors.Is matches ErrConfig (nothing
// started), ErrTimeout, ErrRendezvous, ErrResults, ErrNotFound. The Report is nil when nothing started. When Run
// returns, no process of the job is left: every process group got SIGKILL and the orphan sweep ran.
func Run(ctx context.Context, s Spec) (*Report, error) {
	is, err := s.internal(ctx)
	var rep *spec.Report
	if err == nil {
		rep, err = job.Run(ctx, is)
	}
	return reportOf(rep), errorOf(err)
}
