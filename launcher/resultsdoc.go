package launcher

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"tpurun/launcher/results"
	"tpurun/worker"
)

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

// ReplicaError is a world whose workers exited 0 but where replicas reported errors (function mode: the function
// raised); exit 1, as xmp.spawn's parent fails.
type ReplicaError struct {
	Replicas []results.Result // the failed replicas
}

func (e *ReplicaError) Error() string {
	r := e.Replicas[0]
	return fmt.Sprintf("%d replica(s) reported an error; replica %d (rank %d, pid %d) raised %s: %s",
		len(e.Replicas), r.Replica, r.Rank, r.PID, r.Error.Type, r.Error.Message)
}

// Unwrap makes errors.Is(err, ErrReplicaError) true.
func (e *ReplicaError) Unwrap() error { return ErrReplicaError }

// finishResults builds the results document of the last attempt (node 0: of the whole world), decides the
// outcome of the job from the workers' error runErr and the document (outcome), writes the results file, and
// returns the document and the job's error.
func (j *job) finishResults(exits []results.RankExit, c *results.Collector, runErr error) (*results.Document, error) {
	doc, violations := c.Finish(exits)
	doc.RunID = j.spec.RunID
	err := j.outcome(doc, violations, runErr)
	if werr := j.writeResultsFile(doc); werr != nil && err == nil {
		err = werr
	}
	return doc, err
}

// outcome decides doc's exit code in results.Document.Decide's order and returns the job's error to match: the
// run's failure (runFailure) wins; then the contract's violations (a *ResultsError, 65); then the replicas'
// errors (a *ReplicaError, 1); then the result sink's complaint about a channel that failed between frames
// (runErr, ErrResults), which the document does not hold.
func (j *job) outcome(doc *results.Document, violations, runErr error) error {
	if failure := j.runFailure(doc, runErr); failure != nil {
		doc.Decide(ExitCode(failure))
		return failure
	}
	switch doc.Decide(ExitOK) {
	case ExitResults:
		return &ResultsError{Violations: leaves(violations), Replicas: len(doc.ReplicaErrors())}
	case ExitReplicaError:
		return &ReplicaError{Replicas: doc.ReplicaErrors()}
	}
	if runErr != nil {
		doc.Decide(ExitCode(runErr))
	}
	return runErr
}

// runFailure is what failed the run whatever its results say: a function target the runner could not use (a
// *ConfigError, exit 2, first of all), a worker's or another node's failure, or any error of the run but the
// result sink's complaint (ErrResults). It is nil when the results decide.
func (j *job) runFailure(doc *results.Document, runErr error) error {
	if err := j.targetError(doc); err != nil {
		return err
	}
	var we *WorkerError
	var ne *NodeError
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &we), errors.As(runErr, &ne), !errors.Is(runErr, ErrResults):
		return runErr
	}
	return nil
}

// targetError is the configuration error of a function target the runner could not use (its replicas report
// worker.TargetErrorType), or nil.
func (j *job) targetError(doc *results.Document) error {
	if j.spec.Fn == nil {
		return nil
	}
	for _, r := range doc.ReplicaErrors() {
		if r.Error.Type == worker.TargetErrorType {
			return &ConfigError{Field: "function", Value: j.spec.Fn.Target, Hint: r.Error.Message}
		}
	}
	return nil
}

// leaves is the errors a joined error holds (err itself when it holds none).
func leaves(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	return []error{err}
}

// writeResultsFile writes doc to the results file, if one is asked for; a failure is logged and returned as an
// *OutputError.
func (j *job) writeResultsFile(doc *results.Document) error {
	f := j.spec.Results.File
	if f == "" {
		return nil
	}
	if err := results.WriteFile(f, doc); err != nil {
		j.log.Error("could not write the results file", zap.String("file", f), zap.Error(err))
		return &OutputError{Stream: "results file " + f, Err: err}
	}
	return nil
}
