package spec

import (
	"tpurun/internal/attempt"
	"tpurun/internal/results"
)

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, the job's
// verdict, and on node 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Program  []string // the command every worker ran (the interpreter first for a Python program)
	Attempts []*attempt.Attempt
	Results  *results.Document
	Verdict  *attempt.Verdict // how the job ended; never nil once Run returns a report
}

// Last is the final attempt, nil before any.
func (r *Report) Last() *attempt.Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return r.Attempts[len(r.Attempts)-1]
}
