package summary

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
)

// WriteAttempt writes the per-rank exit summary of one attempt of r, headed by its verdict, and, for an attempt
// that a worker's failure ended, the root cause: the program, the failing rank's last stderr lines and the
// traceback from its error file. A stop (a signal, the timeout, another node) is never shown as a worker's
// failure. One write: the summary stays whole among other output.
func WriteAttempt(w io.Writer, r *spec.Report, a *attempt.Attempt) {
	var b strings.Builder
	v := a.Verdict
	head := fmt.Sprintf("tpurun: run %s attempt %d: %s: %s", r.RunID, a.Number, v.Reason, v.Summary())
	if v.Reason != stop.Done && v.Reason != stop.Failure {
		if clean := cleanRanks(a.Ranks); clean != "" {
			head += "; " + clean
		}
	}
	fmt.Fprintln(&b, head)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RANK\tPID\tSTATUS\tWALL\tCPU\tPEAK RSS")
	for _, s := range a.Ranks {
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\n", s.Rank, s.PID, s.Ended(),
			s.Wall.Round(time.Millisecond), s.CPU().Round(time.Millisecond), bytesText(s.MaxRSS))
	}
	_ = tw.Flush()
	if len(a.Swept) > 0 {
		fmt.Fprintf(&b, "  orphan sweep killed pids %v that still carried TPURUN_RUN_ID=%s\n", a.Swept, r.RunID)
	}
	for _, s := range a.Ranks {
		if s.ResultErr != nil {
			fmt.Fprintf(&b, "  rank %d results: %v\n", s.Rank, s.ResultErr)
		}
	}
	if s := a.Failed(); s != nil {
		writeRootCause(&b, r, s)
	}
	_, _ = io.WriteString(w, b.String())
}

// writeRootCause writes the failed rank's status, the program, its last stderr lines and the traceback its error
// file holds.
func writeRootCause(w io.Writer, r *spec.Report, s *attempt.RankSummary) {
	fmt.Fprintf(w, "  root cause: rank %d (pid %d) %s\n", s.Rank, s.PID, s.Ended())
	if len(r.Program) > 0 {
		fmt.Fprintf(w, "  program: %s\n", programText(r.Program))
	}
	if len(s.StderrTail) > 0 {
		stream := "stderr"
		if s.TailHasStdout {
			stream = "output" // stdout and stderr were one stream, in the order the worker wrote them
		}
		fmt.Fprintf(w, "  last %s lines of rank %d:\n", stream, s.Rank)
		for _, l := range s.StderrTail {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if s.Error != nil {
		from := s.ErrorFile
		if from == "" {
			from = "its TORCHELASTIC_ERROR_FILE"
		}
		fmt.Fprintf(w, "  error from %s: %s\n", from, s.Error.Message)
		for _, l := range strings.Split(strings.TrimRight(s.Error.Traceback, "\n"), "\n") {
			if l != "" {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
}

// LogAttempt logs the summary of one attempt of r as one record (for --log-format json): the same facts as
// WriteAttempt, as fields.
func LogAttempt(log *zap.Logger, r *spec.Report, a *attempt.Attempt) {
	type rank struct {
		Rank    int    `json:"rank"`
		PID     int    `json:"pid"`
		Status  string `json:"status"`
		WallMS  int64  `json:"wall_ms"`
		CPUMS   int64  `json:"cpu_ms"`
		PeakRSS int64  `json:"peak_rss_bytes"`
		Results string `json:"results_error,omitempty"`
	}
	ranks := make([]rank, 0, len(a.Ranks))
	for _, s := range a.Ranks {
		rk := rank{Rank: s.Rank, PID: s.PID, Status: s.Ended(), WallMS: s.Wall.Milliseconds(), CPUMS: s.CPU().Milliseconds(), PeakRSS: s.MaxRSS}
		if s.ResultErr != nil {
			rk.Results = s.ResultErr.Error()
		}
		ranks = append(ranks, rk)
	}
	fields := []zap.Field{zap.String("run_id", r.RunID), zap.Int("attempt", a.Number), zap.String("reason", string(a.Verdict.Reason)),
		zap.String("verdict", a.Verdict.Summary()), zap.Any("ranks", ranks)}
	if len(a.Swept) > 0 {
		fields = append(fields, zap.Ints("swept_pids", a.Swept))
	}
	s := a.Failed()
	if s == nil {
		log.Info("attempt ended", fields...)
		return
	}
	fields = append(fields, zap.Int("root_cause_rank", s.Rank), zap.Strings("program", r.Program), zap.Strings("stderr_tail", s.StderrTail))
	if s.TailHasStdout {
		fields = append(fields, zap.Bool("tail_has_stdout", true)) // stdout and stderr were one stream
	}
	if s.Error != nil {
		fields = append(fields, zap.String("error", s.Error.Message), zap.String("traceback", s.Error.Traceback))
	}
	log.Error("attempt ended", fields...)
}

// Printer prints each attempt's summary once, when it ends (an Observer of AttemptEnded): attempt 0's
// failure is shown before the restart runs attempt 1, not after. Text goes to w (which must not block: a
// Console's LogWriter), or one record per attempt to log for --log-format json. Finish prints what is left.
type Printer struct {
	w       io.Writer
	log     *zap.Logger // nil: text
	quiet   bool        // only the attempts that did not end well
	mu      sync.Mutex
	printed map[*attempt.Attempt]bool
}

// NewPrinter prints summaries as text on w, or, when log is not nil, as log records; quiet: only those of the
// attempts that did not end well (tpurun --quiet).
func NewPrinter(w io.Writer, log *zap.Logger, quiet bool) *Printer {
	return &Printer{w: w, log: log, quiet: quiet, printed: map[*attempt.Attempt]bool{}}
}

// Observe prints the attempt that just ended.
func (p *Printer) Observe(e spec.Event) {
	if e.Kind == spec.AttemptEnded && e.Ended != nil && e.Report != nil {
		p.print(e.Report, e.Ended)
	}
}

// Finish prints every attempt of rep not printed yet.
func (p *Printer) Finish(rep *spec.Report) {
	for _, a := range rep.Attempts {
		if a != nil {
			p.print(rep, a)
		}
	}
}

func (p *Printer) print(rep *spec.Report, a *attempt.Attempt) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed[a] || a.Verdict == nil || p.quiet && a.Verdict.OK() {
		return
	}
	p.printed[a] = true
	if p.log != nil {
		LogAttempt(p.log, rep, a)
		return
	}
	WriteAttempt(p.w, rep, a)
}

// programText is the command line as the summary shows it, with the file its first word ran (python3 from PATH
// is /usr/bin/python3, say), at most 200 bytes of arguments.
func programText(p []string) string {
	args := strings.Join(p[1:], " ")
	if len(args) > 200 {
		args = args[:200] + "..."
	}
	first := p[0]
	if path, err := proc.LookPath(first); err == nil && path != first {
		first += " (" + path + ")"
	}
	return strings.TrimSpace(first + " " + args)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

// cleanRanks lists the ranks that ended with exit code 0, for a stopped attempt's summary.
func cleanRanks(ranks []attempt.RankSummary) string {
	var ok []string
	for _, r := range ranks {
		if r.Success() {
			ok = append(ok, fmt.Sprint(r.Rank))
		}
	}
	switch len(ok) {
	case 0:
		return ""
	case len(ranks):
		return "every rank finished cleanly (exit 0)"
	case 1:
		return "rank " + ok[0] + " finished cleanly (exit 0)"
	}
	return "ranks " + strings.Join(ok, ", ") + " finished cleanly (exit 0)"
}

// WriteResults writes what the results document says went wrong: every contract violation with its hint, and every
// replica's reported error, with its traceback when tracebacks is set (a run that prints the document leaves them
// to it); as one record on log when given (--log-format json). It writes nothing for a clean document.
func WriteResults(w io.Writer, log *zap.Logger, doc *results.Document, tracebacks bool) {
	switch {
	case doc == nil:
	case log != nil: // --log-format json: one record with the same facts
		logResults(log, doc, tracebacks)
	default:
		for _, v := range doc.Violations {
			fmt.Fprintf(w, "  results: %s: %s\n", v.Kind, v.Message)
			if v.Hint != "" {
				fmt.Fprintf(w, "    hint: %s\n", v.Hint)
			}
		}
		for _, r := range doc.ReplicaErrors() {
			writeReplicaError(w, r, tracebacks)
		}
	}
}

// logResults is WriteResults as one record on log.
func logResults(log *zap.Logger, doc *results.Document, tracebacks bool) {
	failed := doc.ReplicaErrors()
	if !tracebacks { // the document printed beside it has them
		for i := range failed {
			e := *failed[i].Error
			e.Traceback, failed[i].Error = "", &e
		}
	}
	if len(doc.Violations) > 0 || len(failed) > 0 {
		log.Warn("results", zap.Any("violations", doc.Violations), zap.Any("replica_errors", failed))
	}
}

// writeReplicaError writes the error replica r reported, with its traceback when tracebacks is set.
func writeReplicaError(w io.Writer, r results.Result, tracebacks bool) {
	fmt.Fprintf(w, "  root cause: replica %d (rank %d, pid %d) raised %s: %s\n",
		r.Replica, r.Rank, r.PID, r.Error.Type, r.Error.Message)
	if !tracebacks {
		return
	}
	for _, l := range strings.Split(strings.TrimRight(r.Error.Traceback, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}
