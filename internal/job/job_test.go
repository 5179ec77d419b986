package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/worker"
)

// FuzzVerdict: outcomes published by other nodes (untrusted JSON) never panic the verdict, and a verdict is
// always a failure.
func FuzzVerdict(f *testing.F) {
	for _, s := range []string{`[]`, `[{"node":0,"verdict":{"code":0}}]`, `[{"verdict":{"code":7,"reason":"failure"}},{"verdict":{"code":143,"reason":"remote"}}]`, `[{"verdict":{"code":-1}}]`,
		`[{"results":[{"replica":-5}]}]`, `[{"exits":[{"rank":1e99}]}]`, `null`, `[null]`, `{"a":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var all []outcome
		if json.Unmarshal([]byte(s), &all) != nil {
			return
		}
		v, failed := worldVerdict(all)
		if failed && v.Code == 0 {
			t.Fatalf("verdict failed with code 0 from %s", s)
		}
	})
}

// TestFinishResultsPrecedence: the job's error and the document's exit code agree, in one order: a function target
// the runner could not use (2), then the run's failure (a worker's, another node's, a timeout), then the contract's
// violations (65), then the replicas' errors (1), then the result sink's complaint about a channel (65).
func TestFinishResultsPrecedence(t *testing.T) {
	workerFailed := &stop.Verdict{Reason: stop.Failure, Code: 3, Node: -1,
		Err: &proc.WorkerError{Rank: 0, Exit: proc.Exit{PID: 10, ExitCode: 3}}}
	nodeFailed := &stop.Verdict{Reason: stop.Remote, Code: 65, Node: 1, Err: &failure.NodeError{Node: 1, Code: 65, Message: "bad results"}}
	timedOut := &stop.Verdict{Reason: stop.Timeout, Code: failure.ExitTimeout, Node: -1, Err: fmt.Errorf("%w: after 1s", failure.ErrTimeout)}
	sinkErr := &failure.ResultError{Rank: 0, PID: 10, Err: errors.New("read: deadline exceeded")}
	complaint := &stop.Verdict{Reason: stop.Done, Code: failure.ExitCode(sinkErr), Node: -1, Err: sinkErr}
	ok := func(c *worker.Client) { _ = c.Report(0, 1) }
	raised := func(c *worker.Client) { _ = c.Fail(0, errors.New("loss is NaN")) }
	twice := func(c *worker.Client) { _ = c.Report(0, 1); _ = c.Report(0, 2) }
	target := func(c *worker.Client) {
		_ = c.Send(worker.Frame{Kind: worker.KindError, Encoding: worker.EncodingJSON, Replica: 0,
			Payload: []byte(`{"type":"` + worker.TargetErrorType + `","message":"no module named m"}`)})
	}
	for _, tc := range []struct {
		name   string
		fn     bool
		report func(*worker.Client)
		runErr error
		code   int
		want   any // the error's type, or the runErr itself
	}{
		{"clean", false, ok, nil, 0, nil},
		{"violations", false, twice, nil, failure.ExitResults, &failure.ResultsError{}},
		{"replica error", false, raised, nil, failure.ExitReplicaError, &results.ReplicaError{}},
		{"worker failure beats violations", false, twice, workerFailed, 3, workerFailed},
		{"node failure beats a replica error", false, raised, nodeFailed, 65, nodeFailed},
		{"timeout beats a replica error", false, raised, timedOut, failure.ExitTimeout, timedOut},
		{"violations beat the sink's complaint", false, twice, complaint, failure.ExitResults, &failure.ResultsError{}},
		{"a replica error beats the sink's complaint", false, raised, complaint, failure.ExitReplicaError, &results.ReplicaError{}},
		{"the sink's complaint alone", false, ok, complaint, failure.ExitResults, complaint},
		{"target error beats a worker failure", true, target, workerFailed, failure.ExitUsage, &failure.ConfigError{}},
		{"target error outside function mode", false, target, nil, failure.ExitReplicaError, &results.ReplicaError{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ch bytes.Buffer
			tc.report(worker.NewClient(&ch, []int{0}))
			c := results.NewCollector(results.Options{})
			if err := c.Consume(0, 10, []int{0}, &ch); err != nil {
				t.Fatal(err)
			}
			j := &job{spec: spec.Spec{Options: attempt.Options{RunID: "r"}}}
			if tc.fn {
				j.spec.Fn = &spec.FnSpec{Target: "m:f"}
			}
			exits := []results.RankExit{{Rank: 0, PID: 10}}
			doc, err := j.finishResults(exits, c, tc.runErr)
			if doc.ExitCode != tc.code || doc.OK != (tc.code == 0) || failure.ExitCode(err) != tc.code || doc.RunID != "r" {
				t.Errorf("document exit %d ok %v, error %v (exit %d); want exit %d", doc.ExitCode, doc.OK, err, failure.ExitCode(err), tc.code)
			}
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
			case *stop.Verdict:
				if err != want {
					t.Errorf("error %v, want the run's %v", err, want)
				}
			default:
				if fmt.Sprintf("%T", err) != fmt.Sprintf("%T", want) {
					t.Errorf("error %T %v, want a %T", err, err, want)
				}
			}
		})
	}
}
