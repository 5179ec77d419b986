package job

import (
	"errors"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/worker"
)

// newCollector is the result collector of one attempt of this node's workers in plan.
func (j *job) newCollector(plan *topology.Plan, nodeRank int) *results.Collector {
	return results.NewCollector(results.Options{
		MaxFrameBytes: j.spec.Results.MaxFrameBytes,
		Required:      j.spec.Results.Required,
		RunID:         j.spec.RunID,
		WorldSize:     len(plan.Workers),
		Nodes:         max(1, len(plan.Nodes)),
		NodeRank:      nodeRank,
		Logger:        j.log,
		OnResult:      func() { j.obs.Emit(spec.Event{Kind: spec.ResultReceived}) },
	})
}

// finishResults builds the results document of the last attempt (node 0: of the whole world), decides the
// outcome of the job from the workers' error runErr and the document (resultsError), writes the results file, and
// returns the document and the job's error.
func (j *job) finishResults(exits []results.RankExit, c *results.Collector, runErr error) (*results.Document, error) {
	doc, violations := c.Finish(exits)
	doc.RunID = j.spec.RunID
	err := j.resultsError(doc, violations, runErr)
	if werr := j.writeResultsFile(doc); werr != nil && err == nil {
		err = werr
	}
	return doc, err
}

// resultsError decides doc's exit code in results.Document.Decide's order and returns the job's error to match: the
// run's failure (runFailure) wins; then the contract's violations (a *failure.ResultsError, 65); then the replicas'
// errors (a *results.ReplicaError, 1); then the result sink's complaint about a channel that failed between frames
// (runErr, failure.ErrResults), which the document does not hold.
func (j *job) resultsError(doc *results.Document, violations, runErr error) error {
	if fail := j.runFailure(doc, runErr); fail != nil {
		doc.Decide(failure.ExitCode(fail))
		return fail
	}
	switch doc.Decide(failure.ExitOK) {
	case failure.ExitResults:
		return &failure.ResultsError{Violations: leaves(violations), Replicas: len(doc.ReplicaErrors())}
	case failure.ExitReplicaError:
		return &results.ReplicaError{Replicas: doc.ReplicaErrors()}
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
	if runErr != nil && !errors.Is(runErr, failure.ErrResults) { // a worker's or a node's failure is never ErrResults
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
			return &failure.ConfigError{Field: failure.Function, Value: j.spec.Fn.Target, Hint: r.Error.Message}
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
