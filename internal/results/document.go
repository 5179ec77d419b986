package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/worker"
)

// Document is the results of one run, as written by --results and printed by --json.
type Document struct {
	RunID      string       `json:"run_id"`
	World      World        `json:"world"`
	Results    []Result     `json:"results"`
	Ranks      []RankStatus `json:"ranks"`
	Violations []Violation  `json:"violations"`
	OK         bool         `json:"ok"`
	ExitCode   int          `json:"exit_code"`
}

// Decide sets the document's exit code and OK, and returns the code. failed is the exit code of what failed the
// run, 0 when nothing did; it wins. Then a violated contract gives failure.ExitResults (65), then a replica's
// reported error failure.ExitReplicaError (1); else the code is 0. This is the one place that order is written:
// Finish decides with the first failed exit it was given, and a launcher that knows better what failed the run (a
// timeout, a signal, another node's verdict) decides again with that failure's code.
func (d *Document) Decide(failed int) int {
	d.ExitCode = failed
	switch {
	case failed != 0:
	case len(d.Violations) > 0:
		d.ExitCode = failure.ExitResults
	case len(d.ReplicaErrors()) > 0:
		d.ExitCode = failure.ExitReplicaError
	}
	d.OK = d.ExitCode == 0
	return d.ExitCode
}

// ReplicaErrors returns the results that are a replica's reported error, in replica order.
func (d *Document) ReplicaErrors() []Result {
	return slices.DeleteFunc(slices.Clone(d.Results), func(r Result) bool { return r.OK || r.Error == nil })
}

// World is the size of the run.
type World struct {
	Size  int `json:"size"`
	Nodes int `json:"nodes"`
}

// Result is the outcome of one replica: a value (JSON in Value, or a pickle in ValueB64 with Encoding "pickle")
// or an error.
type Result struct {
	Replica  int             `json:"replica"`
	Rank     int             `json:"rank"`
	PID      int             `json:"pid"`
	Node     int             `json:"node"`
	OK       bool            `json:"ok"`
	Encoding string          `json:"encoding,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	ValueB64 []byte          `json:"value_b64,omitempty"`
	Error    *ErrorInfo      `json:"error,omitempty"`
}

// ErrorInfo is a worker's failure as it reported it (the payload of its error frame).
type ErrorInfo = worker.ErrorInfo

// RankExit is how a worker process ended, filled in by the launcher. ExitCode is the exit status, or 128+N when
// the worker was killed by signal N (then Signal names it, e.g. "killed" or "SIGKILL"); Err is a launcher-side
// failure (could not start, ...). The first failed RankExit passed to Finish gives the run's exit code.
type RankExit struct {
	Rank     int    `json:"rank"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Err      string `json:"error,omitempty"`
}

// ExitOf is how a worker process ended, as the document records it: the one conversion from a proc.Exit. The exit
// status, or 128+N and the signal's name for a worker killed by signal N.
func ExitOf(rank int, e proc.Exit) RankExit {
	x := RankExit{Rank: rank, PID: e.PID, ExitCode: e.ExitStatus()}
	if e.Signal != 0 {
		x.Signal = failure.SignalName(e.Signal)
	}
	return x
}

// Failed reports whether the worker did not end with exit code 0.
func (e RankExit) Failed() bool { return e.ExitCode != 0 || e.Signal != "" || e.Err != "" }

// RankStatus is a rank's exit in the document.
type RankStatus struct {
	RankExit
	OK bool `json:"ok"`
}

// Violation is a contract violation in the document.
type Violation struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Replica int    `json:"replica"`
	Rank    int    `json:"rank"`
	PID     int    `json:"pid"`
	Hint    string `json:"hint,omitempty"`
}

// WriteFile writes doc to path atomically: to a new temporary file in the same directory (created with O_EXCL
// (os.CreateTemp), so a planted file or symlink is never followed or overwritten), then renamed over path, mode 0644.
func WriteFile(path string, doc *Document) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the results document for %s: %w", path, err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write the results document %s: create a temporary file in %s: %w", path, dir, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			err = fmt.Errorf("rename %s: %w", tmp, err)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the results document %s: %w", path, err)
	}
	return nil
}
