package launcher

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/hostname"
	"tpurun/launcher/console"
	"tpurun/launcher/failure"
	"tpurun/launcher/proc"
	"tpurun/launcher/topology"
	"tpurun/launcher/workerenv"
	"tpurun/worker"
)

// The defaults of a Spec's zero fields that tpurun's flags show.
const (
	DefaultGrace      = 10 * time.Second // Spec.Grace: SIGTERM to SIGKILL (tpurun --grace)
	DefaultMasterAddr = "127.0.0.1"      // Spec.MasterAddr (tpurun --master-addr)
)

// Spec is everything one job needs, on one host or many. It is read once by Run and never written: observers
// subscribe through Observers, not by rewiring it. Zero values take the documented defaults.
type Spec struct {
	Program []string // program and arguments; ${local_rank} in arguments is expanded per worker
	Fn      *FnSpec  // function mode (xmp.spawn's fn): when set, Program is the Python function runner
	// Preload: Python modules imported once, by one interpreter per host that proves it holds no thread, device
	// or runtime and then forks every worker (and every restart's) instead of exec'ing Program, which must be a
	// Python program (FILE.py, -m MODULE, function mode). "__main__" is function mode's caller's main module.
	// Needs the reaper (see NoReaper). Empty: every worker is exec'd.
	Preload []string
	Env     []string // inherited environment; nil means os.Environ()
	Dir     string   // working directory of the workers; "" is the launcher's

	// Detect says how to find this host's devices; Request how to split them. Detection runs once per Run.
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

	Grace        time.Duration // SIGTERM to SIGKILL; default DefaultGrace
	Timeout      time.Duration // stop the whole job after this long (failure.ErrTimeout); 0 means none
	MaxRestarts  int           // restart the whole world up to this many times after a failure
	DrainTimeout time.Duration // after the subtree is gone, how long a pipe may stay idle before it is given up; default 2s

	RunID      string // default: random (multi-host: the rendezvous run id)
	MasterAddr string // default DefaultMasterAddr (multi-host: node 0's address)
	MasterPort int    // default: a free port picked at launch
	Role       string // ROLE_NAME; default workerenv.DefaultRole

	LogDir           string          // per-rank files DIR/<run-id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log
	Redirects        console.StdSpec // streams that go only to the log files
	Tee              console.StdSpec // streams that go to the console and the log files
	LocalRanksFilter []int           // show only these local ranks on the console; nil shows all
	LogPrefix        string          // per-line prefix template; default console.DefaultPrefix ({rank} or torchrun's $rank, see console.Prefix)
	RawOutput        bool            // worker lines go to the console as they are, without LogPrefix (torchrun's default)
	Stdout, Stderr   io.Writer
	// Stdin is what the workers read (the CLI passes its own stdin, as torchrun's workers inherit it); nil gives
	// every worker /dev/null. StdinTo says which workers get it. When Stdin is the terminal whose foreground group
	// tpurun's is, local rank 0's group gets the terminal and only it reads it (docs/CONTROL.md).
	Stdin   *os.File
	StdinTo console.StdinMode

	Results ResultsSpec

	Logger         *zap.Logger
	SampleInterval time.Duration // live RSS/CPU sampling; default 1s, negative disables
	ProcRoot       string        // default /proc, for the orphan sweep

	// Signals are the signals the job acts on and forwards to its workers (see NotifySignals). nil: Run catches
	// them itself while it runs, so that a SIGTERM to the program stops the job (exit 143) instead of ending the
	// program and leaving the workers' children running; with NoSignals nil means none.
	Signals   <-chan os.Signal
	NoSignals bool
	// NoReaper keeps Run from reaping: by default this process becomes the child subreaper of the job's processes
	// for as long as Run runs (PID 1 always reaps), so that an orphan a worker leaves is reaped, never left a
	// zombie, and is found by the sweep even outside the worker's group; one reaper serves the Runs of a process.
	// The reaper forks the workers and waits for every child of the process: while Run reaps, nothing else in the
	// process may wait for a child (exec.Cmd.Wait would race it), so a program that starts processes of its own
	// meanwhile sets NoReaper (orphans then go to PID 1, swept by the sweep tag in their environment).
	NoReaper bool
	// SweepSubtree says this process runs nothing but the job, as tpurun does: the orphan sweep (with the reaper,
	// while no other Run of the process uses it) then walks the whole subtree of the process and also finds an
	// orphan that dropped the job's environment; it would kill any other process of the program too. Off, the
	// sweep finds the job's processes by the sweep tag in their environment.
	SweepSubtree bool
	// SweepTag is given to every worker as TPURUN_SWEEP_TAG and the orphan sweep by environment matches it:
	// launchers sharing a run id on one machine must not sweep each other's workers. Default: random.
	SweepTag string
	// Observers learn of attempts, failures, samples, results and rendezvous times (the status endpoint, say).
	Observers []Observer
}

// ResultsSpec is the result contract of a job: whether every replica must report, the largest frame, and where
// the results document goes.
type ResultsSpec struct {
	Required      bool   // every replica must report a result (implied by function mode)
	MaxFrameBytes int64  // largest accepted payload; default results.DefaultMaxFrameBytes
	File          string // write the document here atomically (on every node), also when the job fails; checked first
	// Document: Report.Results is wanted on every node of a multi-host job, not only on node 0 (which builds it
	// for the world); the other nodes receive it when the job ends. Implied by File.
	Document bool
}

// FnSpec is function mode: fn(index, *args) in every worker, its return value collected (xmp.spawn's contract).
type FnSpec struct {
	Target   string   // package.module:function or path/to/file.py:function
	ArgsJSON string   // JSON list of the first arguments after index; "" is []
	Args     []string // further arguments, passed as strings
	Python   string   // interpreter; default $PYTHON_EXEC, else python3
}

// Version is tpurun's version.
const Version = "0.2.0"

// ExitWithParent makes the kernel send this process SIGTERM when the process that started it exits, so a
// launcher whose caller was killed stops its workers gracefully instead of running on. A caller that is already
// gone is a *failure.SignalError (exit 143).
func ExitWithParent() error {
	if err := proc.ExitWithParent(syscall.SIGTERM); err != nil {
		if errors.Is(err, proc.ErrParentGone) {
			return &failure.SignalError{Signal: syscall.SIGTERM, During: "the start: the process that started tpurun has already exited"}
		}
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	return nil
}

// Validate checks the settings that need no detection; every error is a *failure.ConfigError or a *failure.ProgramError.
func (s *Spec) Validate() error {
	if s.Fn == nil && (len(s.Program) == 0 || s.Program[0] == "") {
		return &failure.ConfigError{Field: failure.SettingProgram, Value: "", Hint: "no program given; usage: tpurun [flags] [--] PROGRAM [ARGS...]"}
	}
	if s.Fn == nil {
		if _, err := exec.LookPath(s.Program[0]); err != nil {
			return &failure.ProgramError{Program: s.Program[0], Err: err}
		}
	}
	for _, d := range []struct {
		name failure.Setting
		v    time.Duration
	}{{failure.SettingGrace, s.Grace}, {failure.SettingTimeout, s.Timeout}} {
		if d.v < 0 {
			return &failure.ConfigError{Field: d.name, Value: d.v.String(), Hint: "must not be negative"}
		}
	}
	if s.MaxRestarts < 0 {
		return &failure.ConfigError{Field: failure.SettingMaxRestarts, Value: strconv.Itoa(s.MaxRestarts), Hint: "must be 0 or more"}
	}
	if s.MasterAddr != "" && hostname.Check(s.MasterAddr) != nil {
		return &failure.ConfigError{Field: failure.SettingMasterAddr, Value: s.MasterAddr, Hint: "is neither an IP address nor a host name; give node 0's address, e.g. 10.0.0.2 or host-0.example"}
	}
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		return &failure.ConfigError{Field: failure.SettingMasterPort, Value: strconv.Itoa(s.MasterPort), Hint: "must be 1..65535, or 0 to pick a free port"}
	}
	if s.RunID != "" {
		if err := validateName(failure.SettingRunID, s.RunID); err != nil {
			return err
		}
	}
	if s.Role != "" {
		if err := validateName(failure.SettingRole, s.Role); err != nil {
			return err
		}
	}
	if s.Results.MaxFrameBytes < 0 || s.Results.MaxFrameBytes > worker.MaxPayload {
		return &failure.ConfigError{Field: failure.SettingMaxResultBytes, Value: strconv.FormatInt(s.Results.MaxFrameBytes, 10),
			Hint: fmt.Sprintf("must be 1..%d bytes", int64(worker.MaxPayload))}
	}
	if s.Plan != nil && len(s.Plan.Local(s.NodeRank)) == 0 {
		return &failure.ConfigError{Field: failure.SettingNodeRank, Value: strconv.Itoa(s.NodeRank),
			Hint: fmt.Sprintf("the plan has no workers on node %d; it has %d node(s)", s.NodeRank, len(s.Plan.Nodes))}
	}
	return cmp.Or(s.checkPreload(), s.Rendezvous.validate())
}

// validateName checks a run id or role: it becomes a directory name and an env value, so it holds no path
// separator, no "..", no control character, and at most 128 bytes.
func validateName(what failure.Setting, v string) error {
	bad := ""
	switch {
	case len(v) > 128:
		bad = fmt.Sprintf("is %d bytes long; the limit is 128", len(v))
	case v == "." || v == ".." || strings.Contains(v, ".."):
		bad = "contains '..'"
	case strings.ContainsAny(v, "/\\="):
		bad = "contains '/', '\\' or '='"
	}
	for _, r := range v {
		if bad == "" && (r < 0x20 || r == 0x7f) {
			bad = "contains a control character"
		}
	}
	if bad == "" {
		return nil
	}
	return &failure.ConfigError{Field: what, Value: v, Hint: bad + "; use letters, digits, '.', '-' and '_'"}
}

// withDefaults returns s with the defaults filled in.
func (s Spec) withDefaults() (Spec, error) {
	if s.Env == nil {
		s.Env = os.Environ()
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 2 * time.Second
	}
	if s.MasterAddr == "" {
		s.MasterAddr = DefaultMasterAddr
	}
	if s.Role == "" {
		s.Role = workerenv.DefaultRole
	}
	if s.LogPrefix == "" {
		s.LogPrefix = console.DefaultPrefix
	}
	if s.Stdout == nil {
		s.Stdout = os.Stdout
	}
	if s.Stderr == nil {
		s.Stderr = os.Stderr
	}
	if s.Logger == nil {
		s.Logger = zap.NewNop()
	}
	if s.SampleInterval == 0 {
		s.SampleInterval = time.Second
	}
	if s.ProcRoot == "" {
		s.ProcRoot = "/proc"
	}
	if s.Results.MaxFrameBytes == 0 {
		s.Results.MaxFrameBytes = worker.DefaultMaxPayload
	}
	if s.Fn != nil {
		s.Results.Required = true
	}
	if s.RunID == "" {
		s.RunID = s.Rendezvous.RunID
	}
	if s.RunID == "" {
		id, err := randomHex(6)
		if err != nil {
			return s, err
		}
		s.RunID = id
	}
	if s.SweepTag == "" {
		tag, err := randomHex(8)
		if err != nil {
			return s, err
		}
		s.SweepTag = s.RunID + "-" + tag
	}
	if (s.Redirects.Any() || s.Tee.Any()) && s.LogDir == "" {
		// A private directory (0700) of this run: a fixed shared one would be another user's, or world-listable.
		d, err := os.MkdirTemp("", "tpurun-logs-")
		if err != nil {
			return s, fmt.Errorf("%w: log directory for redirected streams: %w; set a log directory or TMPDIR", failure.ErrInternal, err)
		}
		s.LogDir = d
	}
	return s, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%w: random id: %w", failure.ErrInternal, err)
	}
	return hex.EncodeToString(b), nil
}

// checkOutputs refuses, before anything starts, a results file or log directory that cannot be written.
func (s *Spec) checkOutputs() error {
	if f := s.Results.File; f != "" {
		dir := f[:strings.LastIndexByte("/"+f, '/')]
		if dir == "" {
			dir = "."
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return &failure.ConfigError{Field: failure.SettingResultsFile, Value: f, Hint: fmt.Sprintf("its directory %q does not exist or is not a directory; create it first", dir)}
		}
		if st, err := os.Stat(f); err == nil && !st.Mode().IsRegular() {
			return &failure.ConfigError{Field: failure.SettingResultsFile, Value: f, Hint: "exists and is not a regular file"}
		}
	}
	if d := s.LogDir; d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: d, Hint: "exists and is not a directory"}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: d, Hint: err.Error()}
		}
	}
	return nil
}
