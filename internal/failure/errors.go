package failure

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// NodeError is the world's verdict as another node decided it: node Node failed (or node 0 found the world's
// results wrong) and every node exits with Code.
type NodeError struct {
	Node    int
	Code    int
	Message string
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d failed: %s", e.Node, e.Message) }

// ExitStatus is the world's code.
func (e *NodeError) ExitStatus() int { return e.Code }

// JobClosedError is a node that found its job already finished when it joined (the rendezvous's ErrJobClosed): a
// late elastic node or a replacement that arrived, or waited, after the job closed, or a node whose restart the
// other nodes did not make. Err is the rendezvous's error ("job <id> already finished (generation g, exit c)"), Code
// the job's exit code it names.
type JobClosedError struct {
	Err  error
	Code int
	Ran  bool // this node ran an attempt of the job
}

func (e *JobClosedError) Error() string {
	if e.Ran {
		return e.Err.Error() + ": the other nodes ended it instead of restarting"
	}
	return e.Err.Error() + ": this node came after its end and has nothing to do (to run the job again, give it another --rdzv-id, or start it once every node of the old one is done)"
}

func (e *JobClosedError) Unwrap() error { return e.Err }

// ExitStatus is 0 for a node that took no part in the job (nothing to do, nothing failed), else the job's code.
func (e *JobClosedError) ExitStatus() int {
	if !e.Ran {
		return ExitOK
	}
	return e.Code
}

// SignalError is a run stopped by a stop signal tpurun received (in an attempt, or during the join, say).
type SignalError struct {
	Signal syscall.Signal
	During string // what tpurun was doing, e.g. "the rendezvous join"
}

func (e *SignalError) Error() string {
	return fmt.Sprintf("received %s during %s; stopped", SignalName(e.Signal), e.During)
}

// ExitStatus is 128+N for signal N, as a shell reports a process it killed.
func (e *SignalError) ExitStatus() int { return ExitSignal(e.Signal) }

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
	return []error{programKind(e.Err, e.AtExec), e.Err}
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

// ResultsError is a world whose workers succeeded but whose results broke the contract (exit 65): duplicate,
// foreign, missing, oversized or malformed reports. Violations holds each one (*results.ContractError).
type ResultsError struct {
	Violations []error
	Replicas   int // replicas that reported an error besides
}

func (e *ResultsError) Error() string {
	return fmt.Sprintf("%d violation(s) of the result contract, %d replica error(s)", len(e.Violations), e.Replicas)
}

// Unwrap exposes ErrResults and every violation.
func (e *ResultsError) Unwrap() []error { return append([]error{ErrResults}, e.Violations...) }

// OutputError is a failed write to the launcher's stdout or stderr. EPIPE (a reader that went away, as with
// `| head -1`) exits 141 like a program killed by SIGPIPE; any other error (a full disk) exits 74.
type OutputError struct {
	Stream  string // "stdout", "stderr", "results file PATH"
	Err     error
	Stopped bool // the error stopped the run (a console); false when it came after the run (the results file)
}

func (e *OutputError) Error() string {
	if e.Stopped {
		return fmt.Sprintf("writing %s failed: %v; the run was stopped", e.Stream, e.Err)
	}
	return fmt.Sprintf("writing %s failed: %v", e.Stream, e.Err)
}

func (e *OutputError) Unwrap() error { return e.Err }

// ExitStatus is 141 for EPIPE (the reader went away, as with `| head -1`: what SIGPIPE would give), else 74.
func (e *OutputError) ExitStatus() int {
	if errors.Is(e.Err, syscall.EPIPE) {
		return ExitSignal(syscall.SIGPIPE)
	}
	return ExitIOError
}

// SignalName is sig's name ("SIGTERM"), or "signal N" for a number without one.
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}
