package failure

import (
	"errors"
	"os/exec"
	"syscall"
)

// The categories of a job's errors, one per row of ExitTable that an error (rather than a carried code) decides:
// callers branch on them with errors.Is, and ExitCode maps them to codes. Each layer's errors match their category
// through Is or Unwrap (a topology or rendezvous configuration error matches ErrConfig; results' violations
// ErrResults), so this package names no layer's errors.
var (
	// ErrConfig: a setting is wrong (exit 2): a *ConfigError, or any layer's configuration error (NewConfigKind).
	ErrConfig = errors.New("invalid configuration")
	// ErrTimeout: Spec.Timeout (--timeout) expired (exit 124).
	ErrTimeout = errors.New("run timed out")
	// ErrResults: the workers succeeded but their results broke the contract (exit 65).
	ErrResults = errors.New("result contract violated")
	// ErrReplicaError: the workers exited 0 but a replica reported an error (exit 1).
	ErrReplicaError = errors.New("a replica reported an error")
	// ErrRendezvous: the nodes could not meet or agree at run time (exit 69). The job marks a rendezvous's runtime
	// error with it; a bare error of package rendezvous is not one.
	ErrRendezvous = errors.New("rendezvous failed")
	// ErrInternal: tpurun itself failed (exit 70): a pipe, a directory it could not make.
	ErrInternal = errors.New("internal launcher error")
	// ErrNotFound: PROGRAM was not found (exit 127).
	ErrNotFound = errors.New("program not found")
	// ErrNotExecutable: PROGRAM was found but cannot be executed (exit 126).
	ErrNotExecutable = errors.New("program cannot be executed")
)

// NewConfigKind returns a sentinel error with text msg, as errors.New(msg) does, that also matches ErrConfig: a
// layer's own kind of configuration error ("malformed value", "unsafe path"), which exits 2.
func NewConfigKind(msg string) error { return &kind{msg: msg, category: ErrConfig} }

// kind is a layer's sentinel within a category.
type kind struct {
	msg      string
	category error
}

func (k *kind) Error() string { return k.msg }

// Unwrap returns the category, so errors.Is(k, category) holds.
func (k *kind) Unwrap() error { return k.category }

// programKind is ErrNotFound for a PROGRAM that is not there, else ErrNotExecutable.
func programKind(err error, atExec bool) error {
	if !atExec && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOENT)) {
		return ErrNotFound
	}
	return ErrNotExecutable
}
