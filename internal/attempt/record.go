package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/safepath"
	"tpurun/internal/stop"

	"golang.org/x/sys/unix"
)

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Verdict *stop.Verdict // how this attempt ended (its reason, exit code, root cause)
	Ranks   []RankSummary // in local-rank order
	Swept   []int         // pids the orphan sweep had to kill
	LogDir  string        // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

	EndOrder []int // ranks in the order their processes ended (for the results document's exit code)
}

// RankSummary is one worker of one attempt: how its process ended (the Exit: PID, ExitCode, Signal, Wall and the
// resource usage from wait4's rusage; Ended says it as text) and what the launcher saw of it.
type RankSummary struct {
	Rank, LocalRank int
	proc.Exit
	Sampled    Sample // last live sample (gopsutil)
	StderrTail []string
	// TailHasStdout says that StderrTail holds the worker's stdout too: its stdout and stderr were one stream,
	// in the order it wrote them (see Runner's oneStream).
	TailHasStdout bool
	ErrorFile     string
	Error         *ErrorRecord // parsed ErrorFile, nil if the worker wrote none
	ResultErr     error        // from the result sink
}

// Failed is the summary of the rank whose failure ended the attempt, nil when no worker's failure did.
func (a *Attempt) Failed() *RankSummary {
	v := a.Verdict
	if v == nil || v.Reason != stop.Failure || v.Failure == nil {
		return nil
	}
	if i := slices.IndexFunc(a.Ranks, func(s RankSummary) bool { return s.Rank == v.Failure.Rank }); i >= 0 {
		return &a.Ranks[i]
	}
	return nil
}

// ResultExits is how each rank of a ended, in the order the processes ended (ranks that never ended, e.g. never
// started, follow in rank order), as results.Collector.Finish wants it: the exit status, or 128+N and the
// signal's name for a rank killed by signal N.
func (a *Attempt) ResultExits() []results.RankExit {
	left := make(map[int]proc.Exit, len(a.Ranks))
	for _, s := range a.Ranks {
		left[s.Rank] = s.Exit
	}
	out := make([]results.RankExit, 0, len(a.Ranks))
	for _, rank := range a.EndOrder { // each rank once, every one of them in Ranks
		out = append(out, results.ExitOf(rank, left[rank]))
		delete(left, rank)
	}
	for _, s := range a.Ranks {
		if _, ok := left[s.Rank]; ok {
			out = append(out, results.ExitOf(s.Rank, s.Exit))
		}
	}
	return out
}

// readResults reads the worker's result channel (the read end of its fd 3) into the collector until EOF, or until
// the launcher stops draining (os.ErrDeadlineExceeded). A violation of the result contract is the collector's to
// report; only its other failures are this rank's (a *failure.ResultError in the report, failure.ErrResults).
func readResults(coll *results.Collector, wk *child, pid int) {
	var violation *results.ContractError
	err := coll.Consume(wk.w.Rank, pid, wk.w.Replicas, wk.drain.Reader(wk.readers[2]))
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &violation) {
		wk.resErr = err
	}
}

// maxErrorFile bounds how much of a TORCHELASTIC_ERROR_FILE is read.
const maxErrorFile = 1 << 20

// ErrorRecord is what PyTorch's @record wrote to TORCHELASTIC_ERROR_FILE on an uncaught exception.
type ErrorRecord struct {
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
	raw       []byte // the file as the worker wrote it
}

// ParseErrorFile parses the body of a TORCHELASTIC_ERROR_FILE:
// {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}; a plain string
// "message" is accepted too.
func ParseErrorFile(b []byte) (*ErrorRecord, error) {
	var doc struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("error file is not JSON: %w", err)
	}
	if len(doc.Message) == 0 || string(doc.Message) == "null" {
		return nil, fmt.Errorf("error file has no \"message\" field")
	}
	var s string
	if err := json.Unmarshal(doc.Message, &s); err == nil {
		return &ErrorRecord{Message: s}, nil
	}
	var m struct {
		Message   string `json:"message"`
		ExtraInfo struct {
			PyCallstack string `json:"py_callstack"`
			Timestamp   string `json:"timestamp"`
		} `json:"extraInfo"`
	}
	if err := json.Unmarshal(doc.Message, &m); err != nil {
		return nil, fmt.Errorf("error file \"message\" is neither a string nor {message, extraInfo}: %w", err)
	}
	return &ErrorRecord{Message: m.Message, Traceback: m.ExtraInfo.PyCallstack, Timestamp: m.ExtraInfo.Timestamp}, nil
}

// Raw is the file as the worker wrote it (nil for a record not read from a file).
func (r *ErrorRecord) Raw() []byte { return r.raw }

// readErrorFile reads and parses path; a missing file is (nil, nil). The file is the worker's to write, so it is
// opened as a worker could have left it, without trusting it: without blocking (a FIFO put in its place would
// otherwise hold tpurun forever, deaf to signals), without following a symlink, and read only if it is a regular
// file, at most maxErrorFile bytes of it.
func readErrorFile(path string) (*ErrorRecord, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, &safepath.NotRegularError{Path: path, Mode: fs.ModeSymlink}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &safepath.NotRegularError{Path: path, Mode: st.Mode().Type()}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxErrorFile))
	if err != nil {
		return nil, err
	}
	rec, err := ParseErrorFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rec.raw = b
	return rec, nil
}
