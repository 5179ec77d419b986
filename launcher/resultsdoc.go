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
// outcome of the job from the workers' error runErr and the document, writes the results file, and returns the
// document and the job's error. A worker's failure wins; then an unusable function target (exit 2); then the
// contract's violations (65); then replicas' errors (1).
func (j *job) finishResults(exits []results.RankExit, c *results.Collector, runErr error) (*results.Document, error) {
	doc, violations := c.Finish(exits)
	doc.RunID = j.spec.RunID
	err := runErr
	var failed []results.Result
	for _, r := range doc.Results {
		if !r.OK && r.Error != nil {
			failed = append(failed, r)
		}
	}
	var we *WorkerError
	var ne *NodeError
	workerFailed := errors.As(runErr, &we) || errors.As(runErr, &ne)
	if j.spec.Fn != nil {
		for _, r := range failed {
			if r.Error.Type == worker.TargetErrorType {
				err = &ConfigError{Field: "function", Value: j.spec.Fn.Target, Hint: r.Error.Message}
				break
			}
		}
	}
	if err == runErr && !workerFailed && (runErr == nil || errors.Is(runErr, ErrResults)) {
		switch {
		case violations != nil:
			var vs []error
			if u, ok := violations.(interface{ Unwrap() []error }); ok {
				vs = u.Unwrap()
			} else {
				vs = []error{violations}
			}
			err = &ResultsError{Violations: vs, Replicas: len(failed)}
		case len(failed) > 0:
			err = &ReplicaError{Replicas: failed}
		}
	}
	doc.ExitCode = ExitCode(err)
	doc.OK = doc.ExitCode == 0
	if werr := j.writeResultsFile(doc); werr != nil && err == nil {
		err = werr
	}
	return doc, err
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
