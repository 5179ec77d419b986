// Package spec owns the job's description as the launcher's inside reads it: the Spec (with its option structs,
// defaults and the checks that need no host), the Report of a run and the Observer's Events, the environment helpers
// (the JobSet's run id) and the rule that picks the workers' Python. The job, the host's preparation and the command
// line share it; package launcher converts its public Spec into this one. It starts no process.
package spec

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
)

// The defaults of a Spec's zero fields that tpurun's flags show.
const (
	DefaultGrace      = 10 * time.Second // Spec.Grace: SIGTERM to SIGKILL (tpurun --grace)
	DefaultMasterAddr = "127.0.0.1"      // Spec.MasterAddr (tpurun --master-addr)
)

// Spec is everything one job needs, on one host or many: launcher.Spec as the launcher's inside reads it, whose
// fields document what they share with it. Run reads it once and never writes it. Zero values take the defaults.
type Spec struct {
	attempt.Options // the settings the attempts read (the program, its stop, its output, the sweep), handed as they are

	Fn      *FnSpec  // function mode (xmp.spawn's fn): when set, Program is the Python function runner
	Preload []string // modules the one interpreter per host imports before it forks every worker; needs Reap

	// Detect says how to find this host's devices (once per Run); Request how to split them.
	Detect  topology.Options
	Request topology.Request
	// PerCPU: one worker per CPU core when detection finds no accelerator (torchrun's --nproc-per-node cpu/auto).
	PerCPU bool
	// Force starts even when another process holds a chip.
	Force bool
	// Plan, when set, replaces detection and planning: a ready single-host plan (tests, programs that build their
	// own); NodeRank says which of its nodes this launcher runs.
	Plan     *topology.Plan
	NodeRank int

	// Rendezvous joins this launcher with the other nodes of a multi-host job; the zero value is a world of one.
	Rendezvous RendezvousSpec

	MasterAddr string // default DefaultMasterAddr (multi-host: node 0's address)
	MasterPort int    // default: a free port picked at launch

	Stdout, Stderr io.Writer

	Results ResultsSpec

	Logger         *zap.Logger
	SampleInterval time.Duration // live RSS/CPU sampling; default 1s, negative disables

	// Signals are the signals the job acts on and forwards to its workers (see stop.NotifySignals); nil with
	// CatchSignals: Run catches them itself while it runs; nil without it: none.
	Signals      <-chan os.Signal
	CatchSignals bool
	// Reap makes this process the child subreaper of the job's processes while Run runs (PID 1 always reaps); one
	// reaper serves the Runs of a process. Off, Run waits only for the processes it started (by pidfd).
	Reap bool
	// Observers learn of attempts, failures, samples, results and rendezvous times (the status endpoint, say).
	Observers []Observer
}

// ResultsSpec is the result contract of a job (launcher.ResultsSpec): whether every replica must report, the
// largest frame, and where the results document goes.
type ResultsSpec struct {
	Required      bool   // every replica must report a result (implied by function mode)
	MaxFrameBytes int64  // largest accepted payload; 0 means the frame decoder's default, worker.DefaultMaxPayload
	File          string // write the document here atomically (on every node), also when the job fails; checked first
	Document      bool   // Report.Results is wanted on every node, not only node 0 (which sends it); implied by File
}

// FnSpec is function mode: fn(index, *args) in every worker, its return value collected (xmp.spawn's contract).
type FnSpec struct {
	Target   string   // package.module:function or path/to/file.py:function
	ArgsJSON string   // JSON list of the first arguments after index; "" is []
	Args     []string // further arguments, passed as strings
	Python   string   // interpreter; default ResolvePython's (without the tpurun binary's rule)
}

// WithDefaults returns s with the defaults filled in; randomRunID says that its RunID was made up at random (a
// world laid out by the host takes "none" instead: see host's discover).
func (s Spec) WithDefaults() (_ Spec, randomRunID bool, err error) {
	if s.Env == nil {
		s.Env = os.Environ()
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 2 * time.Second
	}
	s.Grace = cmp.Or(s.Grace, DefaultGrace)
	s.MasterAddr = cmp.Or(s.MasterAddr, DefaultMasterAddr)
	s.Role = cmp.Or(s.Role, workerenv.DefaultRole)
	s.LogPrefix = cmp.Or(s.LogPrefix, console.DefaultPrefix)
	s.Stdout = cmp.Or[io.Writer](s.Stdout, os.Stdout) // compared with nil alone: no writer is ever compared
	s.Stderr = cmp.Or[io.Writer](s.Stderr, os.Stderr)
	s.Logger = cmp.Or(s.Logger, zap.NewNop())
	s.SampleInterval = cmp.Or(s.SampleInterval, time.Second)
	if s.Detect.LookupEnv == nil {
		s.Detect.LookupEnv = EnvLookup(s.Env) // detection reads the workers' environment
	}
	s.Results.Required = s.Results.Required || s.Fn != nil
	if randomRunID, err = s.defaultIDs(); err != nil {
		return s, false, err
	}
	return s, randomRunID, s.defaultLogDir()
}

// defaultIDs fills in the run id and the sweep tag (the run id and a random part). The run id is the one given, else
// the rendezvous's, else the JobSet's (JobSetRunID), else for a world of several nodes torchrun's "none" (every
// node must have the same), else random.
func (s *Spec) defaultIDs() (random bool, err error) {
	s.RunID = cmp.Or(s.RunID, s.Rendezvous.RunID, JobSetRunID(s.Env))
	if s.RunID == "" && !s.Rendezvous.Solo() {
		s.RunID = NoRunID
	}
	if s.RunID == "" {
		id, err := randomHex(6)
		if err != nil {
			return false, err
		}
		s.RunID, random = id, true
	}
	if s.SweepTag == "" {
		tag, err := randomHex(8)
		if err != nil {
			return random, err
		}
		s.SweepTag = s.RunID + "-" + tag
	}
	return random, nil
}

// defaultLogDir gives redirected or teed streams a log directory when none is set: a private one (0700) of this
// run, since a fixed shared one would be another user's, or world-listable.
func (s *Spec) defaultLogDir() error {
	if s.LogDir != "" || !s.Redirects.Any() && !s.Tee.Any() {
		return nil
	}
	d, err := os.MkdirTemp("", "tpurun-logs-")
	if err != nil {
		return fmt.Errorf("%w: log directory for redirected streams: %w; set a log directory or TMPDIR", failure.ErrInternal, err)
	}
	s.LogDir = d
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%w: random id: %w", failure.ErrInternal, err)
	}
	return hex.EncodeToString(b), nil
}
