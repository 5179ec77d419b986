package job

import (
	"errors"

	"go.uber.org/zap"

	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/results"
	"tpurun/internal/setting"
	"tpurun/worker"
)

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
// run's failure (runFailure) wins; then the contract's violations (a *failure.ResultsError, 65); then the replicas'
// errors (a *failure.ReplicaError, 1); then the result sink's complaint about a channel that failed between frames
// (runErr, failure.ErrResults), which the document does not hold.
func (j *job) outcome(doc *results.Document, violations, runErr error) error {
	if fail := j.runFailure(doc, runErr); fail != nil {
		doc.Decide(failure.ExitCode(fail))
		return fail
	}
	switch doc.Decide(exitcode.OK) {
	case exitcode.Results:
		return &failure.ResultsError{Violations: leaves(violations), Replicas: len(doc.ReplicaErrors())}
	case exitcode.ReplicaError:
		return &failure.ReplicaError{Replicas: doc.ReplicaErrors()}
	}
	if runErr != nil {
		doc.Decide(failure.ExitCode(runErr))
	}
	return runErr
}

// runFailure is what failed the run whatever its results say: a function target the runner could not use (a
// *failure.ConfigError, exit 2, first of all), a worker's or another node's failure, or any error of the run but the
// result sink's complaint (failure.ErrResults). It is nil when the results decide.
func (j *job) runFailure(doc *results.Document, runErr error) error {
	if err := j.targetError(doc); err != nil {
		return err
	}
	var we *failure.WorkerError
	var ne *failure.NodeError
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &we), errors.As(runErr, &ne), !errors.Is(runErr, failure.ErrResults):
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
			return &failure.ConfigError{Field: setting.Function, Value: j.spec.Fn.Target, Hint: r.Error.Message}
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
// *failure.OutputError.
func (j *job) writeResultsFile(doc *results.Document) error {
	f := j.spec.Results.File
	if f == "" {
		return nil
	}
	if err := results.WriteFile(f, doc); err != nil {
		j.log.Error("could not write the results file", zap.String("file", f), zap.Error(err))
		return &failure.OutputError{Stream: "results file " + f, Err: err}
	}
	return nil
}
