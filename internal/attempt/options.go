package attempt

import (
	"os"
	"time"

	"tpurun/internal/console"
)

// Options is the part of the job's Spec that its attempts read: the workers' command, their stop, their output and
// the sweep. The Spec embeds it and the job hands it to the Runner as it is, so that a setting has one field.
type Options struct {
	Program []string // program and arguments; ${local_rank} in arguments is expanded per worker
	Env     []string // inherited environment; nil means os.Environ()
	Dir     string   // working directory of the workers; "" is the launcher's

	RunID    string // default: random (multi-host: the rendezvous run id)
	Role     string // ROLE_NAME; default workerenv.DefaultRole
	SweepTag string // given to every worker as TPURUN_SWEEP_TAG, which the sweep by environment matches; default random

	Grace        time.Duration // SIGTERM to SIGKILL; default DefaultGrace
	Timeout      time.Duration // stop the whole job after this long (failure.ErrTimeout); 0 means none
	MaxRestarts  int           // restart the whole world up to this many times after a failure
	DrainTimeout time.Duration // after the subtree is gone, how long a pipe may stay idle before it is given up; default 2s

	LogDir           string          // per-rank files DIR/<run-id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log
	Redirects        console.StdSpec // streams that go only to the log files
	Tee              console.StdSpec // streams that go to the console and the log files
	LocalRanksFilter []int           // show only these local ranks on the console; nil shows all
	LogPrefix        string          // per-line prefix template; default console.DefaultPrefix ({rank} or torchrun's $rank, see console.Prefix)
	RawOutput        bool            // worker lines go to the console as they are, without LogPrefix (torchrun's default)
	// Stdin is what the workers read (the CLI passes its own stdin, as torchrun's workers inherit it); nil gives
	// every worker /dev/null. StdinTo says which workers get it. When Stdin is the terminal whose foreground group
	// tpurun's is, only local rank 0 reads it, through a pseudo-terminal tpurun relays it to (docs/CONTROL.md).
	Stdin   *os.File
	StdinTo console.StdinMode

	// SweepSubtree says this process runs nothing but the job, as tpurun does: the orphan sweep (with the reaper,
	// while no other Run of the process uses it) then walks the whole subtree of the process and also finds an
	// orphan that dropped the job's environment; it would kill any other process of the program too. Off, the
	// sweep finds the job's processes by the sweep tag in their environment.
	SweepSubtree bool
}
