package launcher

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/launcher/proc"
	"tpurun/launcher/topology"
)

// Config is everything one run needs. Zero values take the documented defaults.
type Config struct {
	Plan     *topology.Plan
	NodeRank int      // which node of the plan this launcher starts (plan.Local(NodeRank))
	Program  []string // program and arguments; ${local_rank} in arguments is expanded per worker
	Env      []string // inherited environment; nil means os.Environ()
	Dir      string   // working directory of the workers; "" is the launcher's

	Grace        time.Duration // SIGTERM to SIGKILL; default 10s
	Timeout      time.Duration // stop the run after this long (ErrTimeout); 0 means none
	MaxRestarts  int           // restart the whole group up to this many times after a failure
	DrainTimeout time.Duration // how long output and result pipes are drained after the workers are gone; default 2s

	// Restarts managed outside this Run (a multi-host world restarts as a new generation and runs each with
	// MaxRestarts 0): the workers see TORCHELASTIC_RESTART_COUNT = PriorRestarts + the attempt, and
	// TORCHELASTIC_MAX_RESTARTS = the larger of MaxRestarts and WorldMaxRestarts.
	PriorRestarts    int
	WorldMaxRestarts int

	RunID      string // default: random
	MasterAddr string // default 127.0.0.1
	MasterPort int    // default: a free port picked at launch
	Role       string // ROLE_NAME; default "default"

	LogDir           string  // per-rank files DIR/<run-id>/attempt_<n>/<rank>/{stdout,stderr}.log
	Redirects        StdSpec // streams that go only to the log files
	Tee              StdSpec // streams that go to the console and the log files
	LocalRanksFilter []int   // show only these local ranks on the console; nil shows all
	LogPrefix        string  // per-line prefix template; default "[{rank}] "
	Stdout, Stderr   io.Writer

	Logger         *zap.Logger
	Results        ResultSink
	Signals        <-chan os.Signal // signals to forward (the caller does signal.Notify); nil: none
	SampleInterval time.Duration    // live RSS/CPU sampling; default 1s, negative disables
	OnSample       func([]Sample)   // called from the sampler after each round with the live workers' samples
	ProcRoot       string           // default /proc, for the orphan sweep
	// Reaper, when set (PID 1 or --subreaper), is the one wait4(-1) loop that delivers the workers' exits; the
	// launcher then never calls exec.Cmd.Wait, which would race it.
	Reaper *proc.Reaper
	// OnFailure, when set, is called from the supervisor the moment a worker fails (before the others are
	// stopped), once per failed attempt; it must not block. Multi-host runs use it to tell the other nodes at once.
	OnFailure func(*WorkerError)
	// SweepTag is given to every worker as TPURUN_SWEEP_TAG and the orphan sweep by environment matches it, not
	// TPURUN_RUN_ID: launchers sharing a run id on one machine (nodes of one multi-host run, a fixed --run-id
	// reused) must not sweep each other's workers. Default: random, so unique to this launcher.
	SweepTag string

	// NewResults, when set, gives every attempt a fresh result sink (it overrides Results), so a restarted
	// group starts with empty results; Attempt.ResultExits is what a results.Collector's Finish needs.
	NewResults func(attempt int) ResultSink
	// OnAttempt, when set, is called from the supervisor as attempt n (0 first, n > 0 after a restart) begins,
	// before its workers start; it must not block. The status endpoint uses it to turn healthy again.
	OnAttempt func(n int)
}

// withDefaults validates c and fills in defaults. Every error is a *ConfigError.
func (c Config) withDefaults() (Config, error) {
	if c.Plan == nil || len(c.Plan.Workers) == 0 {
		return c, &ConfigError{Field: "plan", Value: "empty", Hint: "the plan has no workers; pass --nprocs N with N >= 1"}
	}
	if len(c.Plan.Local(c.NodeRank)) == 0 {
		return c, &ConfigError{Field: "node rank", Value: strconv.Itoa(c.NodeRank),
			Hint: fmt.Sprintf("the plan has no workers on node %d; it has %d node(s)", c.NodeRank, len(c.Plan.Nodes))}
	}
	if len(c.Program) == 0 || c.Program[0] == "" {
		return c, &ConfigError{Field: "PROGRAM", Value: "", Hint: "no program given; usage: tpurun [flags] [--] PROGRAM [ARGS...]"}
	}
	if _, err := exec.LookPath(c.Program[0]); err != nil {
		return c, &ConfigError{Field: "PROGRAM", Value: c.Program[0],
			Hint: fmt.Sprintf("cannot be run (%v); check the path, PATH and the executable bit", err)}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--grace", c.Grace}, {"--timeout", c.Timeout}} {
		if d.v < 0 {
			return c, &ConfigError{Field: d.name, Value: d.v.String(), Hint: "must not be negative"}
		}
	}
	if c.MaxRestarts < 0 {
		return c, &ConfigError{Field: "--max-restarts", Value: strconv.Itoa(c.MaxRestarts), Hint: "must be 0 or more"}
	}
	if c.MasterPort < 0 || c.MasterPort > 65535 {
		return c, &ConfigError{Field: "MASTER_PORT", Value: strconv.Itoa(c.MasterPort), Hint: "must be 1..65535, or 0 to pick a free port"}
	}
	if c.RunID != "" && strings.ContainsAny(c.RunID, "/\x00=") {
		return c, &ConfigError{Field: "--run-id", Value: c.RunID, Hint: "must not contain '/', '=' or NUL; use letters, digits, '-' and '_'"}
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 2 * time.Second
	}
	if c.RunID == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return c, fmt.Errorf("%w: random run id: %w", ErrInternal, err)
		}
		c.RunID = hex.EncodeToString(b[:])
	}
	if c.SweepTag == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return c, fmt.Errorf("%w: random sweep tag: %w", ErrInternal, err)
		}
		c.SweepTag = c.RunID + "-" + hex.EncodeToString(b[:])
	}
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.Role == "" {
		c.Role = "default"
	}
	if c.LogPrefix == "" {
		c.LogPrefix = "[{rank}] "
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = time.Second
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if (c.Redirects.Any() || c.Tee.Any()) && c.LogDir == "" {
		// A private directory (0700) of this run: a fixed shared one would be another user's, or world-listable.
		d, err := os.MkdirTemp("", "tpurun-logs-")
		if err != nil {
			return c, fmt.Errorf("%w: log directory for --redirects/--tee: %w; pass --log-dir or set TMPDIR", ErrInternal, err)
		}
		c.LogDir = d
	}
	return c, nil
}

// FreePort asks the kernel for a TCP port that is free on addr right now.
func FreePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
