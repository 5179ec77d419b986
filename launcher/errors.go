package launcher

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"tpurun/launcher/proc"
)

// Exit codes of tpurun besides the worker's own (0..125) and 128+N for a worker killed by signal N.
const (
	ExitOK         = 0
	ExitUsage      = 2   // usage or configuration error, nothing was started
	ExitResults    = 65  // the result contract was violated (EX_DATAERR)
	ExitRendezvous = 69  // multi-host rendezvous failed (EX_UNAVAILABLE)
	ExitInternal   = 70  // tpurun itself failed (EX_SOFTWARE)
	ExitTimeout    = 124 // --timeout expired (as timeout(1))
)

// Sentinels callers branch on with errors.Is.
var (
	ErrTimeout  = errors.New("run timed out")
	ErrConfig   = errors.New("invalid configuration")
	ErrResults  = errors.New("result contract violated")
	ErrInternal = errors.New("internal launcher error")
)

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

// Status is the exit code tpurun passes on: the worker's code, or 128+N for signal N.
func (e *WorkerError) Status() int {
	return proc.Exit{Code: e.ExitCode, Signal: e.Signal}.Status()
}

// ConfigError names the setting that is wrong and what to do about it.
type ConfigError struct {
	Field string // flag or field, e.g. "--nprocs"
	Value string
	Hint  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Hint)
}

// Unwrap makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Unwrap() error { return ErrConfig }

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

// ExitCode maps an error returned by Run (or by config parsing) to tpurun's exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var we *WorkerError
	switch {
	case errors.As(err, &we):
		return we.Status()
	case errors.Is(err, ErrConfig):
		return ExitUsage
	case errors.Is(err, ErrTimeout):
		return ExitTimeout
	case errors.Is(err, ErrResults):
		return ExitResults
	case errors.Is(err, context.Canceled):
		return 128 + int(syscall.SIGTERM)
	default:
		return ExitInternal
	}
}

// SignalName is the conventional name of sig, e.g. "SIGKILL".
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGTRAP:
		return "SIGTRAP"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGALRM:
		return "SIGALRM"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	}
	return fmt.Sprintf("signal %d", int(sig))
}
