// Package failure is what a job's error is, which setting it is about and the exit code it gives: the lowest layer
// of tpurun's errors, which every other package may import (it imports nothing of tpurun), in the way of
// containerd's errdefs. It offers:
//
//   - the exit-code table (ExitTable, ExitHelp, the Exit* codes, ExitSignal): the one list that `tpurun --help`,
//     the README and the library's ExitCode share;
//   - the categories callers branch on with errors.Is (ErrConfig, ErrTimeout, ErrResults, ErrReplicaError,
//     ErrRendezvous, ErrInternal, ErrNotFound, ErrNotExecutable), NewConfigKind for a layer's own kind of
//     configuration error, and ExitCode, which maps any error, bare or wrapped, as the table below says;
//   - the vocabulary of settings (Setting and its constants, Named, SettingOf) that a configuration error names, so
//     that the command line can name the flag that sets it;
//   - the typed errors of a job that need no other layer's types: ConfigError, SignalError, ProgramError,
//     OutputError, NodeError, JobClosedError, ResultError, ResultsError.
//
// ExitCode, first match wins:
//
//	an error with an ExitStatus method (a worker's, a verdict's)  its own code
//	ErrNotFound, ErrNotExecutable                                 127, 126
//	ErrConfig (every configuration error of every layer)          2
//	ErrTimeout, and a caller's context.DeadlineExceeded           124
//	ErrResults                                                    65
//	ErrReplicaError                                               1
//	ErrRendezvous                                                 69
//	a caller's context.Canceled                                   143 (as SIGTERM)
//	anything else                                                 70
//	nil                                                           0
//
// ConfigError is every layer's error about a setting (a layer marks its own with Kind). It does not own the other
// errors of the layers above: a worker that failed is proc's WorkerError, a replica's error results' ReplicaError;
// each matches its category here through Is or Unwrap.
package failure
