package launcher

import (
	"context"

	"tpurun/internal/failure"
	"tpurun/internal/job"
	"tpurun/internal/pymodule"
)

// Version is tpurun's version: the embedded Python module's __version__ (worker/python/tpurun/__init__.py), the one
// place it is written, so that the binary, the module and the wheel (make wheel) always agree.
var Version = pymodule.Version()

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to spec.MaxRestarts times. A single host is a world of one. One stop controller owns every reason to stop the
// run, in every phase. Unless the Spec says otherwise, while Run runs it catches the signals a job acts on and this
// process reaps the job's orphans (Spec.Signals, Spec.NoReaper).
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise, once anything could have
// started, it is the job's verdict, from which ExitCode takes the exit code (errors.As also finds the worker's,
// node's, signal's or output's error behind it); before that, a configuration error (ErrConfig), a detection error
// or an error about the program. When Run returns, no process of the job is left: every group got SIGKILL and the
// orphan sweep ran.
func Run(ctx context.Context, spec Spec) (*Report, error) { return job.Run(ctx, spec) }

// ExitCode is the exit code tpurun exits with for err, an error Run returned: 0 for nil, the failing worker's code
// (128+N for signal N), or one of the documented codes (README).
func ExitCode(err error) int { return failure.ExitCode(err) }

// The errors a caller matches (errors.Is) in what Run returns.
var (
	ErrConfig     = failure.ErrConfig     // a setting is wrong: nothing started (exit 2)
	ErrTimeout    = failure.ErrTimeout    // Spec.Timeout expired
	ErrRendezvous = failure.ErrRendezvous // the nodes could not meet or agree (exit 69)
)
