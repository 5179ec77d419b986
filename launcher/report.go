package launcher

import (
	"encoding/json"
	"syscall"
	"time"

	"tpurun/internal/attempt"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
)

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank in it, the
// job's verdict, and on node 0 (or a single host, or with ResultsSpec.Document) the results document of the
// world's last attempt.
type Report struct {
	RunID    string
	Program  []string   // the command every worker ran (the interpreter first for a Python program)
	Attempts []*Attempt // in order: attempt 0, then one per restart
	Results  *Results   // nil when this node has no document
	Verdict  Verdict    // how the job ended
}

// Last is the final attempt, nil before any.
func (r *Report) Last() *Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return r.Attempts[len(r.Attempts)-1]
}

// Attempt is one start of this node's workers: attempt 0, then one per restart of the world.
type Attempt struct {
	Number  int
	Verdict Verdict       // how this attempt ended
	Ranks   []RankSummary // in local-rank order
	Swept   []int         // pids the orphan sweep had to kill
	LogDir  string        // Output.LogDir's DIR/<run-id>_<random>/attempt_<n>; "" without one
}

// Failed is the summary of the rank whose failure ended the attempt, nil when no worker's failure did.
func (a *Attempt) Failed() *RankSummary {
	if a.Verdict.Reason != StopFailure || a.Verdict.Failure == nil {
		return nil
	}
	for i, s := range a.Ranks {
		if s.Rank == a.Verdict.Failure.Rank {
			return &a.Ranks[i]
		}
	}
	return nil
}

// RankSummary is one worker of one attempt: how its process ended (from wait4) and what the launcher saw of it.
type RankSummary struct {
	Rank, LocalRank int
	PID             int
	ExitCode        int            // the exit code, -1 when killed by a signal
	Signal          syscall.Signal // the killing signal, 0 when it exited
	Wall            time.Duration  // from its start to its exit being seen
	MaxRSS          int64          // peak resident set size in bytes (ru_maxrss)
	UserCPU, SysCPU time.Duration
	PeakRSS         uint64   // the largest RSS the sampler saw, in bytes; 0 without samples
	StderrTail      []string // the last lines of its stderr (of both streams when they were one)
	// ErrorMessage and ErrorTraceback are what PyTorch's @record wrote to TORCHELASTIC_ERROR_FILE on an uncaught
	// exception; "" when it wrote nothing.
	ErrorMessage, ErrorTraceback string
	ResultErr                    error // what was wrong with its results, nil when nothing
}

// Verdict is how an attempt or a job ended: its reason, exit code and root cause.
type Verdict struct {
	Reason    StopReason
	Code      int            // the exit code (ExitCode's table)
	Signal    syscall.Signal // the stop signal this process received (StopSignal)
	Failure   *WorkerError   // this node's first failed worker (StopFailure); nil otherwise
	Node      int            // the node that decided the verdict, or that failed or was lost; -1 for none
	Escalated string         // why SIGKILL was needed ("grace 7s expired"); "" when it was not
	During    string         // what the launcher was doing when a stop came outside an attempt
	Message   string         // the cause in words where the fields above do not give it
}

// StopReason says what ended an attempt or a job.
type StopReason string

// The reasons an attempt or a job ends.
const (
	StopDone     StopReason = "done"     // every worker exited on its own
	StopFailure  StopReason = "failure"  // a worker of this node failed; the rest were stopped
	StopStart    StopReason = "start"    // a worker could not be started; the rest were stopped
	StopSignal   StopReason = "signal"   // this process received a stop signal (Process.CatchSignals, Signals)
	StopTimeout  StopReason = "timeout"  // Spec.Timeout expired
	StopCanceled StopReason = "canceled" // the caller's context was canceled or its deadline passed
	StopOutput   StopReason = "output"   // writing Output.Stdout or Stderr failed
	StopRemote   StopReason = "remote"   // another node failed or stopped
	StopLost     StopReason = "lost"     // another node was lost
	StopStore    StopReason = "store"    // the rendezvous store was lost
	StopClosed   StopReason = "closed"   // the job had ended on the other nodes
)

// Sample is the live resource use of one worker, as last sampled.
type Sample struct {
	PID     int
	Rank    int    // the worker's global rank
	RSS     uint64 // bytes
	PeakRSS uint64 // the largest RSS seen, bytes
	CPU     time.Duration
	At      time.Time
}

// Results is the results document of a job (the JSON ResultsSpec.File receives): every replica's result in
// replica order, how each rank ended, the contract's violations, and the exit code they decide.
type Results struct {
	RunID string `json:"run_id"`
	World struct {
		Size  int `json:"size"`
		Nodes int `json:"nodes"`
	} `json:"world"`
	Results    []Result     `json:"results"`
	Ranks      []RankStatus `json:"ranks"`
	Violations []Violation  `json:"violations"`
	OK         bool         `json:"ok"`
	ExitCode   int          `json:"exit_code"`
}

// Result is the outcome of one replica: a JSON value, a pickle (Encoding "pickle", in ValueB64) or an error.
type Result struct {
	Replica  int             `json:"replica"`
	Rank     int             `json:"rank"`
	PID      int             `json:"pid"`
	Node     int             `json:"node"`
	OK       bool            `json:"ok"`
	Encoding string          `json:"encoding,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	ValueB64 []byte          `json:"value_b64,omitempty"`
	Error    *struct {
		Type      string `json:"type"`
		Message   string `json:"message"`
		Traceback string `json:"traceback,omitempty"`
	} `json:"error,omitempty"`
}

// RankStatus is how one rank's process ended, as the document records it: ExitCode is 128+N for signal N.
type RankStatus struct {
	Rank     int    `json:"rank"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	OK       bool   `json:"ok"`
}

// Violation is a breach of the result contract (a missing result, a malformed frame, ...).
type Violation struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Replica int    `json:"replica"`
	Rank    int    `json:"rank"`
	PID     int    `json:"pid"`
	Hint    string `json:"hint,omitempty"`
}

// reportOf is the public report of r; nil for nil.
func reportOf(r *spec.Report) *Report {
	if r == nil {
		return nil
	}
	out := &Report{RunID: r.RunID, Program: r.Program, Results: resultsOf(r.Results), Verdict: verdictOf(r.Verdict)}
	for _, a := range r.Attempts {
		out.Attempts = append(out.Attempts, attemptOf(a))
	}
	return out
}

func attemptOf(a *attempt.Attempt) *Attempt {
	if a == nil {
		return nil
	}
	out := &Attempt{Number: a.Number, Verdict: verdictOf(a.Verdict), Swept: a.Swept, LogDir: a.LogDir}
	for _, r := range a.Ranks {
		s := RankSummary{Rank: r.Rank, LocalRank: r.LocalRank, PID: r.PID, ExitCode: r.ExitCode, Signal: r.Signal,
			Wall: r.Wall, MaxRSS: r.MaxRSS, UserCPU: r.UserCPU, SysCPU: r.SysCPU, PeakRSS: r.Sampled.PeakRSS,
			StderrTail: r.StderrTail, ResultErr: r.ResultErr}
		if r.Error != nil {
			s.ErrorMessage, s.ErrorTraceback = r.Error.Message, r.Error.Traceback
		}
		out.Ranks = append(out.Ranks, s)
	}
	return out
}

func verdictOf(v *stop.Verdict) Verdict {
	if v == nil {
		return Verdict{Reason: StopDone, Node: -1}
	}
	return Verdict{Reason: StopReason(v.Reason), Code: v.Code, Signal: v.Signal, Failure: workerErrorOf(v.Failure),
		Node: v.Node, Escalated: v.Escalated, During: v.During, Message: v.Message}
}

func workerErrorOf(we *proc.WorkerError) *WorkerError {
	if we == nil {
		return nil
	}
	return &WorkerError{Rank: we.Rank, Attempt: we.Attempt, PID: we.PID, Code: we.ExitCode, Signal: we.Signal,
		Wall: we.Wall, msg: we.Error()}
}

func samplesOf(in []attempt.Sample) []Sample {
	out := make([]Sample, len(in))
	for i, s := range in {
		out[i] = Sample(s)
	}
	return out
}

// resultsOf is the public copy of the results document, through its JSON (the one format both write).
func resultsOf(d *results.Document) *Results {
	if d == nil {
		return nil
	}
	b, err := json.Marshal(d)
	out := &Results{}
	if err == nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil { // the document is plain data: this cannot fail
		panic("launcher: results document: " + err.Error())
	}
	return out
}
