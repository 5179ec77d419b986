// Package spec owns what a caller of the launcher gives and gets: the Spec of a job (with its option structs, its
// defaults and the checks that need no host), the Report of a run, and the Observer's Events. The job, the host's
// preparation and the public facade (package launcher, which aliases these names) share it; it knows no process.
package spec

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/hostname"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/setting"
	"tpurun/internal/stop"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/rendezvous"
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
	// tpurun's is, only local rank 0 reads it, through a pseudo-terminal tpurun relays it to (docs/CONTROL.md).
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
	MaxFrameBytes int64  // largest accepted payload; 0 means the frame decoder's default, worker.DefaultMaxPayload
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
	s.ProcRoot = cmp.Or(s.ProcRoot, "/proc")
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

// Validate checks the settings that need no detection; every error is a *failure.ConfigError or a
// *failure.ProgramError, the first one in the order of the checks below.
func (s *Spec) Validate() error {
	return cmp.Or(s.checkProgram(), s.checkBounds(), s.checkMaster(), s.checkNames(), s.checkFrames(), s.checkPlan(),
		s.checkPreload(), s.Rendezvous.Validate())
}

// checkProgram refuses a job without a program, or whose program cannot be found (function mode runs Python,
// found when it is set up).
func (s *Spec) checkProgram() error {
	switch {
	case s.Fn != nil:
		return nil
	case len(s.Program) == 0 || s.Program[0] == "":
		return &failure.ConfigError{Field: setting.Program, Value: "", Hint: "no program given; usage: tpurun [flags] [--] PROGRAM [ARGS...]"}
	}
	if _, err := proc.LookPath(s.Program[0]); err != nil {
		return &failure.ProgramError{Program: s.Program[0], Err: err}
	}
	return nil
}

// checkBounds refuses a negative grace period, timeout or number of restarts.
func (s *Spec) checkBounds() error {
	for _, d := range []struct {
		name setting.Setting
		v    time.Duration
	}{{setting.Grace, s.Grace}, {setting.Timeout, s.Timeout}} {
		if d.v < 0 {
			return &failure.ConfigError{Field: d.name, Value: d.v.String(), Hint: "must not be negative"}
		}
	}
	if s.MaxRestarts < 0 {
		return &failure.ConfigError{Field: setting.MaxRestarts, Value: strconv.Itoa(s.MaxRestarts), Hint: "must be 0 or more"}
	}
	return nil
}

// checkMaster refuses a master address that is no host and a master port that is no port.
func (s *Spec) checkMaster() error {
	if s.MasterAddr != "" && hostname.Check(s.MasterAddr) != nil {
		return &failure.ConfigError{Field: setting.MasterAddr, Value: s.MasterAddr, Hint: "is neither an IP address nor a host name; give node 0's address, e.g. 10.0.0.2 or host-0.example"}
	}
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		return &failure.ConfigError{Field: setting.MasterPort, Value: strconv.Itoa(s.MasterPort), Hint: "must be 1..65535, or 0 to pick a free port"}
	}
	return nil
}

// checkNames refuses a run id or role that cannot be a directory name (see validateName).
func (s *Spec) checkNames() error {
	for _, n := range []struct {
		what setting.Setting
		v    string
	}{{setting.RunID, s.RunID}, {setting.Role, s.Role}} {
		if n.v == "" {
			continue
		}
		if err := validateName(n.what, n.v); err != nil {
			return err
		}
	}
	return nil
}

// checkFrames refuses a largest result frame beyond the contract's.
func (s *Spec) checkFrames() error {
	if s.Results.MaxFrameBytes < 0 || s.Results.MaxFrameBytes > worker.MaxPayload {
		return &failure.ConfigError{Field: setting.MaxResultBytes, Value: strconv.FormatInt(s.Results.MaxFrameBytes, 10),
			Hint: fmt.Sprintf("must be 1..%d bytes", int64(worker.MaxPayload))}
	}
	return nil
}

// checkPlan refuses a ready plan that has no workers on the node this launcher runs.
func (s *Spec) checkPlan() error {
	if s.Plan != nil && len(s.Plan.Local(s.NodeRank)) == 0 {
		return &failure.ConfigError{Field: setting.NodeRank, Value: strconv.Itoa(s.NodeRank),
			Hint: fmt.Sprintf("the plan has no workers on node %d; it has %d node(s)", s.NodeRank, len(s.Plan.Nodes))}
	}
	return nil
}

// validateName checks a run id or role: it becomes a directory name and an env value, so it holds no path
// separator, no "..", no control character, and at most 128 bytes.
func validateName(what setting.Setting, v string) error {
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

// moduleName is a dotted Python module name, or __main__ (function mode's caller).
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// checkPreload validates Spec.Preload: module names, and a reaper to adopt the forked workers.
func (s *Spec) checkPreload() error {
	if len(s.Preload) == 0 {
		return nil
	}
	list := strings.Join(s.Preload, ",")
	for _, m := range s.Preload {
		if !moduleName.MatchString(m) {
			return &failure.ConfigError{Field: setting.Preload, Value: list, Hint: fmt.Sprintf("%q is not a Python module name; "+
				"give dotted module names, comma-separated, e.g. torch,torch.distributed", m)}
		}
	}
	if s.NoReaper && os.Getpid() != 1 {
		return PreloadReaperError(list)
	}
	return nil
}

// PreloadReaperError is the refusal of a preload without the reaper.
func PreloadReaperError(list string) error {
	return &failure.ConfigError{Field: setting.Preload, Value: list, Hint: "the workers forked by the preloaded interpreter are " +
		"re-parented to tpurun, which must be the child subreaper to supervise them: drop --no-subreaper, or --preload"}
}

// Check validates function mode's target and arguments (its interpreter is looked for when it is set up).
func (f *FnSpec) Check() error {
	mod, fn, ok := strings.Cut(f.Target, ":")
	if !ok || mod == "" || fn == "" {
		return &failure.ConfigError{Field: setting.Function, Value: f.Target,
			Hint: "name the function as package.module:function (or path/to/file.py:function)"}
	}
	if f.ArgsJSON != "" {
		var l []json.RawMessage
		if err := json.Unmarshal([]byte(f.ArgsJSON), &l); err != nil {
			return &failure.ConfigError{Field: setting.FunctionArgs, Value: f.ArgsJSON,
				Hint: fmt.Sprintf("must be a JSON list (%v), e.g. '[3, \"x\"]'", err)}
		}
		if err := worker.CheckJSON([]byte(f.ArgsJSON)); err != nil { // the workers' json.loads would refuse it
			v := f.ArgsJSON
			if len(v) > 80 {
				v = v[:80] + "..."
			}
			return &failure.ConfigError{Field: setting.FunctionArgs, Value: v, Hint: fmt.Sprintf("hold %v: pass it as a string (tpurun.spawn pickles such arguments)", err)}
		}
	}
	return nil
}

// EnvLookup looks keys up in env as exec does: the last entry of a key wins.
func EnvLookup(env []string) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k != "" && k == key {
				return v, true
			}
		}
		return "", false
	}
}

// LookupEnv is the value of key in env (last one wins, as for exec).
func LookupEnv(env []string, key string) string {
	v, _ := EnvLookup(env)(key)
	return v
}

// WithoutEnv is env without the entries of key.
func WithoutEnv(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}

// NoRunID is torchrun's run id of a multi-host job given none ("none"): every node of a world must have the same.
const NoRunID = "none"

// The JobSet's identity and restart attempt, as a manifest maps them from the pod's jobset.sigs.k8s.io labels
// through the downward API (examples/kubernetes): the default run id of a pod's job (JobSetRunID).
const (
	EnvJobSetUID            = "JOBSET_UID"
	EnvJobSetName           = "JOBSET_NAME"
	EnvJobSetRestartAttempt = "JOBSET_RESTART_ATTEMPT"
)

// JobSetRunID is the run id of a JobSet's pods when env maps the JobSet's identity (JOBSET_UID, else JOBSET_NAME)
// and restart attempt (JOBSET_RESTART_ATTEMPT): "<identity>-<attempt>", the same on every pod of one attempt and
// another after a restart, so that a restarted JobSet never meets its previous attempt's rendezvous record. ""
// when env names no JobSet.
func JobSetRunID(env []string) string {
	id := cmp.Or(LookupEnv(env, EnvJobSetUID), LookupEnv(env, EnvJobSetName))
	if id == "" {
		return ""
	}
	if a := LookupEnv(env, EnvJobSetRestartAttempt); a != "" {
		return id + "-" + a
	}
	return id
}

// RendezvousSpec says how this launcher meets the other nodes of a multi-host job. The zero value (no backend) is
// a world of one: this host alone, as detected.
type RendezvousSpec struct {
	Backend   string        // static, tcp (alias c10d) or etcd; "" is a world of one
	Endpoint  string        // tcp/static: node 0's host:port; etcd: host:2379[,host:2379...]
	RunID     string        // shared by every node; default Spec.RunID
	NNodes    int           // number of nodes (the most, for an elastic world); 0: from the host list (static)
	MinNodes  int           // elastic: the fewest nodes a generation may have (torchrun's --nnodes MIN:MAX); 0: NNodes
	NodeRank  int           // this node's rank, -1 for any
	Conf      string        // key=value,...: join_timeout, heartbeat, is_host, port, hosts, prefix, linger
	Timeout   time.Duration // bound on the join; 0: the backend's default
	Token     string        // shared secret every message carries; required off loopback
	NodeName  string        // this node's identity; default the hostname (with "#<rank>" when NodeRank is given)
	NodeAddr  string        // the address other nodes reach this node at; default the local address toward the endpoint
	NumSlices int           // multi-slice: number of slices; 0: MEGASCALE_NUM_SLICES as detection read it, else 1
	SliceID   int           // multi-slice: this node's slice; -1: MEGASCALE_SLICE_ID as detection read it, else 0
	// Alone: a world of one on purpose (--nnodes 1, --standalone), also on a host whose environment says it is one
	// of several (a TPU slice's host, a multislice job's); the zero spec on such a host joins the others (discover).
	Alone bool
	// AllowUnauthenticated lets a world laid out by the launch (torchrun's --master-addr line, the slice a host's
	// environment describes) meet off loopback without a token, as torchrun's store does; Run warns once. A
	// rendezvous on an endpoint the caller names (tcp, static with Endpoint) still needs Token off loopback.
	AllowUnauthenticated bool
}

// Solo reports whether r describes a world of one (no rendezvous).
func (r RendezvousSpec) Solo() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Solo()
}

// Elastic reports whether r's backend forms an elastic world (tcp, etcd): it assigns the node ranks, and a node may
// come late, come back or replace one. A fixed world (static, the world of one) is laid out by the launch: its node
// count, node ranks and (static) node 0's endpoint, torchrun's --master-addr.
func (r RendezvousSpec) Elastic() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Elastic()
}

// Validate checks r: its backend, and what a world of one or of several reads of it.
func (r RendezvousSpec) Validate() error {
	if _, err := rendezvous.Lookup(r.Backend); err != nil {
		return err
	}
	if r.Solo() {
		return r.validateSolo()
	}
	if r.NumSlices < 0 || r.SliceID < -1 || (r.NumSlices > 1 && r.SliceID >= r.NumSlices) {
		return &failure.ConfigError{Field: setting.SliceID, Value: fmt.Sprint(r.SliceID), Hint: fmt.Sprintf("need 0..%d for %d slices", max(r.NumSlices-1, 0), r.NumSlices)}
	}
	if r.NodeRank < -1 || (r.NNodes > 0 && r.NodeRank >= r.NNodes) {
		return &failure.ConfigError{Field: setting.NodeRank, Value: fmt.Sprint(r.NodeRank), Hint: fmt.Sprintf("need -1 (any) or 0..%d", r.NNodes-1)}
	}
	if r.RunID != "" {
		return validateName(setting.RendezvousRunID, r.RunID)
	}
	return nil
}

// validateSolo checks what a world of one node still reads of the rendezvous settings, so that a mistyped value
// is refused on one node as it would be on many: the node rank (only 0), the slice, the options and the timeout.
func (r RendezvousSpec) validateSolo() error {
	if r.NodeRank < -1 || r.NodeRank > 0 {
		return &failure.ConfigError{Field: setting.NodeRank, Value: strconv.Itoa(r.NodeRank),
			Hint: "a world of one node has only node rank 0; for several nodes give every node --nnodes N and its rank, or a rendezvous (--rdzv-backend c10d --rdzv-endpoint HOST:PORT)"}
	}
	if r.SliceID < -1 || r.NumSlices < 0 {
		return &failure.ConfigError{Field: setting.SliceID, Value: strconv.Itoa(r.SliceID), Hint: "need 0 or more (a world of one node is slice 0)"}
	}
	if r.Timeout < 0 {
		return &failure.ConfigError{Field: setting.RendezvousTimeout, Value: r.Timeout.String(), Hint: "must be positive"}
	}
	conf, err := rendezvous.ParseConf(r.Conf)
	if err == nil {
		err = rendezvous.CheckConf(conf)
	}
	if err == nil && r.RunID != "" {
		err = validateName(setting.RendezvousRunID, r.RunID)
	}
	return err
}

// Observer learns of a job's progress: the status endpoint, function-mode bookkeeping, metrics. Observe is called
// from the supervisor and the result readers and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what happened.
type EventKind int

// The events a job reports.
const (
	// AttemptStarted: attempt (generation) Attempt begins, before its workers start; 0 first, n > 0 after a restart.
	AttemptStarted EventKind = iota + 1
	// WorkerFailed: Failure is the first failed worker of the attempt, reported before the others are stopped.
	WorkerFailed
	// Sampled: Samples are the live workers' last RSS/CPU samples.
	Sampled
	// ResultReceived: one result was accepted from a worker.
	ResultReceived
	// RendezvousDone: the join of a generation took Rendezvous. Only where nodes meet: a world of one (a single
	// host) does not rendezvous, and reports none.
	RendezvousDone
	// AttemptEnded: Ended is the attempt that just ended, the last of Report.Attempts (its summary can be
	// printed now, before a restart runs the next one).
	AttemptEnded
)

// eventNames are the kinds' names, as the constants spell them.
var eventNames = [...]string{AttemptStarted: "AttemptStarted", WorkerFailed: "WorkerFailed", Sampled: "Sampled",
	ResultReceived: "ResultReceived", RendezvousDone: "RendezvousDone", AttemptEnded: "AttemptEnded"}

// String is the kind's name ("AttemptEnded"), so that an Observer printing an Event shows what happened, not a
// number; a kind this build does not know is "EventKind(N)".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened in a job; the fields that its Kind names are set.
type Event struct {
	Kind       EventKind
	Attempt    int
	Failure    *failure.WorkerError
	Samples    []attempt.Sample
	Rendezvous time.Duration
	Ended      *attempt.Attempt
	Report     *Report
}

// Observers fans an event out to every observer of a Spec.
type Observers []Observer

// Emit gives e to every observer, in order.
func (os Observers) Emit(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, the job's
// verdict, and on node 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Program  []string // the command every worker ran (the interpreter first for a Python program)
	Attempts []*attempt.Attempt
	Results  *results.Document
	Verdict  *stop.Verdict // how the job ended; never nil once Run returns a report
}

// Last is the final attempt, nil before any.
func (r *Report) Last() *attempt.Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return r.Attempts[len(r.Attempts)-1]
}

// EnvPythonExec is torchrun's variable for the workers' interpreter (PROGRAM.py, -m and --run-path); tpurun.spawn's
// is worker.EnvCallerPython.
const EnvPythonExec = "PYTHON_EXEC"

// PythonRule names the rule that chose the workers' interpreter, in the order they are tried.
type PythonRule int

const (
	PythonFlag   PythonRule = iota // --python
	PythonEnv                      // $PYTHON_EXEC (torchrun's variable)
	PythonCaller                   // the interpreter that called tpurun.spawn or tpurun.run ($TPURUN_CALLER_PYTHON)
	PythonBeside                   // the python3 beside the tpurun binary: the Python tpurun was installed into
	PythonPATH                     // python3 from PATH
)

// Python is the workers' interpreter and the rule that chose it.
type Python struct {
	Path string // what the workers run: a path, or "python3" (PythonPATH), looked up on PATH when they start
	Rule PythonRule
}

// ResolvePython is the one owner of the rule that picks the workers' interpreter: flag (--python), else
// $PYTHON_EXEC, else the interpreter that called tpurun.spawn or run, else the python3 beside exe (the tpurun binary:
// a wheel installed into a virtual environment puts tpurun in venv/bin beside venv/bin/python3, as torchrun runs
// its own sys.executable; "" for a launcher that is no tpurun binary), else python3 from PATH. getenv reads the
// launcher's environment.
func ResolvePython(flag string, getenv func(string) string, exe string) Python {
	switch {
	case flag != "":
		return Python{flag, PythonFlag}
	case getenv(EnvPythonExec) != "":
		return Python{getenv(EnvPythonExec), PythonEnv}
	case getenv(worker.EnvCallerPython) != "":
		return Python{getenv(worker.EnvCallerPython), PythonCaller}
	}
	if exe != "" {
		beside := filepath.Join(filepath.Dir(exe), "python3")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return Python{beside, PythonBeside}
		}
	}
	return Python{"python3", PythonPATH}
}

// String says which interpreter and why, for tpurun plan and doctor: "/venv/bin/python3 (beside the tpurun binary
// /venv/bin/tpurun: the Python it was installed into)".
func (p Python) String() string {
	switch p.Rule {
	case PythonFlag:
		return p.Path + " (--python)"
	case PythonEnv:
		return p.Path + " ($" + EnvPythonExec + ")"
	case PythonCaller:
		return p.Path + " (the interpreter that called tpurun.spawn or tpurun.run: $" + worker.EnvCallerPython + ")"
	case PythonBeside:
		return fmt.Sprintf("%s (beside the tpurun binary: the Python it was installed into; --python or $%s to change)", p.Path, EnvPythonExec)
	}
	found, err := proc.LookPath(p.Path)
	if err != nil {
		found = "not found on PATH"
	}
	return fmt.Sprintf("%s from PATH (%s; --python or $%s to change)", p.Path, found, EnvPythonExec)
}
