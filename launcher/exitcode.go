package launcher

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"tpurun/launcher/exitcode"
	"tpurun/launcher/proc"
	"tpurun/launcher/topology"
	"tpurun/rendezvous"
)

// The exit codes of tpurun (the table itself is package exitcode's): every layer returns typed errors (or wraps
// the sentinels below) and ExitCode maps them to these; nothing matches strings.
const (
	ExitOK            = exitcode.OK
	ExitReplicaError  = exitcode.ReplicaError
	ExitUsage         = exitcode.Usage
	ExitIOError       = exitcode.IOError
	ExitResults       = exitcode.Results
	ExitRendezvous    = exitcode.Rendezvous
	ExitInternal      = exitcode.Internal
	ExitTimeout       = exitcode.Timeout
	ExitNotExecutable = exitcode.NotExecutable
	ExitNotFound      = exitcode.NotFound
)

// ExitCodesHelp is the exit-code table as `tpurun --help` and the README show it.
const ExitCodesHelp = exitcode.Help

// Sentinels callers branch on with errors.Is. ErrConfig is a usage error (exitcode.IsUsage), as are the
// configuration errors of the packages below: each marks its own.
var (
	ErrTimeout       = errors.New("run timed out")
	ErrConfig        = exitcode.NewUsage("invalid configuration")
	ErrResults       = errors.New("result contract violated")
	ErrReplicaError  = errors.New("a replica reported an error")
	ErrRendezvous    = errors.New("rendezvous failed")
	ErrInternal      = errors.New("internal launcher error")
	ErrNotFound      = errors.New("program not found")
	ErrNotExecutable = errors.New("program cannot be executed")
)

// ExitCode maps an error returned by Run (or by the parsing of a Spec) to tpurun's exit code: a *Verdict's code,
// decided when the verdict was made; for any other error, the code of its type or sentinel.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if code, ok := typedCode(err); ok {
		return code
	}
	for _, s := range sentinelCodes {
		if s.is(err) {
			return s.code
		}
	}
	return ExitInternal
}

// typedCode is the exit code of the typed errors that carry one.
func typedCode(err error) (int, bool) {
	var (
		v  *Verdict
		jc *JobClosedError
		we *WorkerError
		ne *NodeError
		se *SignalError
		oe *OutputError
	)
	switch {
	case errors.As(err, &v): // decided once, when the verdict was made
		return v.Code, true
	case errors.As(err, &jc):
		return jc.ExitStatus(), true
	case errors.As(err, &we):
		return we.ExitStatus(), true
	case errors.As(err, &ne):
		return ne.Code, true
	case errors.As(err, &se):
		return exitcode.Signal(se.Signal), true
	case errors.As(err, &oe) && errors.Is(oe.Err, syscall.EPIPE):
		return exitcode.Signal(syscall.SIGPIPE), true // the reader went away, as `| head -1`: what SIGPIPE would give
	case oe != nil:
		return ExitIOError, true
	}
	return 0, false
}

// sentinelCodes maps the sentinels (and a usage error, in any layer's terms: exitcode.IsUsage) to their codes, in
// the order they are tested.
var sentinelCodes = []struct {
	is   func(error) bool
	code int
}{
	{sentinel(ErrNotFound), ExitNotFound}, {sentinel(ErrNotExecutable), ExitNotExecutable}, {exitcode.IsUsage, ExitUsage},
	{sentinel(ErrTimeout), ExitTimeout}, {sentinel(ErrResults), ExitResults}, {sentinel(ErrReplicaError), ExitReplicaError},
	{sentinel(ErrRendezvous), ExitRendezvous}, {sentinel(context.Canceled), exitcode.Signal(syscall.SIGTERM)},
}

func sentinel(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// WorkerError is the first worker that failed: the root cause of a failed run.
type WorkerError struct {
	Rank     int
	PID      int
	Attempt  int
	ExitCode int            // -1 when killed by a signal
	Signal   syscall.Signal // 0 when it exited
	Wall     time.Duration
}

func (e *WorkerError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("rank %d (pid %d, attempt %d) was killed by %s after %s",
			e.Rank, e.PID, e.Attempt, SignalName(e.Signal), e.Wall.Round(time.Millisecond))
	}
	return fmt.Sprintf("rank %d (pid %d, attempt %d) exited with code %d after %s",
		e.Rank, e.PID, e.Attempt, e.ExitCode, e.Wall.Round(time.Millisecond))
}

// ExitStatus is the exit code tpurun passes on: the worker's code, or 128+N for signal N.
func (e *WorkerError) ExitStatus() int {
	return proc.Exit{Code: e.ExitCode, Signal: e.Signal}.ExitStatus()
}

// NodeError is the world's verdict as another node decided it: node Node failed (or node 0 found the world's
// results wrong) and every node exits with Code.
type NodeError struct {
	Node    int
	Code    int
	Message string
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d failed: %s", e.Node, e.Message) }

// JobClosedError is a node that found its job already finished when it joined (rendezvous.ErrJobClosed): a late
// elastic node or a replacement that arrived, or waited, after the job closed, or a node whose restart the other
// nodes did not make. Its message is "job <id> already finished (generation g, exit c)".
type JobClosedError struct {
	*rendezvous.JobClosedError
	Ran bool // this node ran an attempt of the job
}

func (e *JobClosedError) Error() string {
	if e.Ran {
		return e.JobClosedError.Error() + ": the other nodes ended it instead of restarting"
	}
	return e.JobClosedError.Error() + ": this node came after its end and has nothing to do (to run the job again, give it another --rdzv-id, or start it once every node of the old one is done)"
}

func (e *JobClosedError) Unwrap() error { return e.JobClosedError }

// ExitStatus is 0 for a node that took no part in the job (nothing to do, nothing failed), else the job's code.
func (e *JobClosedError) ExitStatus() int {
	if !e.Ran {
		return ExitOK
	}
	return e.ExitCode
}

// SignalError is a run stopped by a stop signal tpurun received (in an attempt, or during the join, say).
type SignalError struct {
	Signal syscall.Signal
	During string // what tpurun was doing, e.g. "the rendezvous join"
}

func (e *SignalError) Error() string {
	return fmt.Sprintf("received %s during %s; stopped", SignalName(e.Signal), e.During)
}

// ConfigError names the setting that is wrong and what to do about it.
type ConfigError struct {
	Field string // the setting, e.g. "nprocs" or "MASTER_PORT"
	Value string
	Hint  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Hint)
}

// Unwrap makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// ProgramError is a PROGRAM that cannot be started: not found (127) or not executable (126).
type ProgramError struct {
	Program string
	Err     error // from exec.LookPath or the kernel
	AtExec  bool  // found, but execve failed (a #! interpreter that does not exist, say): 126, as a shell
}

func (e *ProgramError) Error() string {
	return fmt.Sprintf("PROGRAM %q cannot be run (%v); check the path, PATH, the executable bit and its #! interpreter", e.Program, e.Err)
}

// Unwrap exposes the cause and ErrNotFound or ErrNotExecutable.
func (e *ProgramError) Unwrap() []error {
	kind := ErrNotExecutable
	if !e.AtExec && (errors.Is(e.Err, exec.ErrNotFound) || errors.Is(e.Err, syscall.ENOENT)) {
		kind = ErrNotFound
	}
	return []error{kind, e.Err}
}

// ResultError is a result sink's complaint about one worker's result channel.
type ResultError struct {
	Rank int
	PID  int
	Err  error
}

func (e *ResultError) Error() string {
	return fmt.Sprintf("results of rank %d (pid %d): %v", e.Rank, e.PID, e.Err)
}

// Unwrap returns the sink's error.
func (e *ResultError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrResults) true.
func (e *ResultError) Is(target error) bool { return target == ErrResults }

// SignalName is the conventional name of sig, e.g. "SIGKILL" (or "signal 42" for one without a name).
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// Setting names the setting a configuration error is about ("" when err is not one): a *ConfigError's Field, a
// detection error's variable, or "rendezvous " and the rendezvous error's field. The CLI maps it to its flag.
func Setting(err error) string {
	var ce *ConfigError
	var te *topology.ConfigError
	var re *rendezvous.Error
	switch {
	case errors.As(err, &ce):
		return ce.Field
	case errors.As(err, &re) && re.Field != "":
		return "rendezvous " + re.Field
	case errors.As(err, &te):
		return te.Name
	}
	return ""
}
