package launcher

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"tpurun/launcher/attempt"
	"tpurun/launcher/failure"
	"tpurun/launcher/results"
)

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, the job's
// verdict, and on node 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Program  []string // the command every worker ran (the interpreter first for a Python program)
	Attempts []*Attempt
	Results  *results.Document
	Verdict  *attempt.Verdict // how the job ended; never nil once Run returns a report
}

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Verdict *attempt.Verdict // how this attempt ended (its reason, exit code, root cause)
	Ranks   []RankSummary    // in local-rank order
	Swept   []int            // pids the orphan sweep had to kill
	LogDir  string           // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

	EndOrder []int // ranks in the order their processes ended (for the results document's exit code)

	stopSeq int // the controller's count of job-wide causes when the attempt ended
}

// RankSummary is one worker of one attempt.
type RankSummary struct {
	Rank, LocalRank, PID int
	ExitCode             int            // -1 when killed by a signal
	Signal               syscall.Signal // 0 when it exited
	Wall                 time.Duration
	UserCPU, SysCPU      time.Duration // from wait4's rusage
	MaxRSS               int64         // bytes, from wait4's rusage
	Sampled              Sample        // last live sample (gopsutil)
	StderrTail           []string
	ErrorFile            string
	Error                *ErrorRecord // parsed ErrorFile, nil if the worker wrote none
	ResultErr            error        // from the ResultSink
}

// Ended is how the rank ended, as text: "ok", "exit 85" or "SIGKILL".
func (r RankSummary) Ended() string {
	switch {
	case r.Signal != 0:
		return failure.SignalName(r.Signal)
	case r.ExitCode == 0:
		return "ok"
	default:
		return fmt.Sprintf("exit %d", r.ExitCode)
	}
}

// Last is the final attempt, nil before any.
func (r *Report) Last() *Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return r.Attempts[len(r.Attempts)-1]
}

// WriteSummary writes the per-rank exit summary of every attempt (WriteAttempt).
func (r *Report) WriteSummary(w io.Writer) {
	for _, a := range r.Attempts {
		r.WriteAttempt(w, a)
	}
}

// WriteAttempt writes the per-rank exit summary of one attempt, headed by its verdict, and, for an attempt that a
// worker's failure ended, the root cause: the program, the failing rank's last stderr lines and the traceback from
// its error file. A stop (a signal, the timeout, another node) is never shown as a worker's failure. One write: the
// summary stays whole among other output.
func (r *Report) WriteAttempt(w io.Writer, a *Attempt) {
	var b strings.Builder
	v := a.Verdict
	head := fmt.Sprintf("tpurun: run %s attempt %d: %s: %s", r.RunID, a.Number, v.Reason, v.Summary())
	if v.Reason != attempt.StopDone && v.Reason != attempt.StopFailure {
		if clean := cleanRanks(a.Ranks); clean != "" {
			head += "; " + clean
		}
	}
	fmt.Fprintln(&b, head)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RANK\tPID\tSTATUS\tWALL\tCPU\tPEAK RSS")
	for _, s := range a.Ranks {
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\n", s.Rank, s.PID, s.Ended(),
			s.Wall.Round(time.Millisecond), (s.UserCPU + s.SysCPU).Round(time.Millisecond), bytesText(s.MaxRSS))
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
	if s := a.failed(); s != nil {
		r.writeRootCause(&b, s)
	}
	_, _ = io.WriteString(w, b.String())
}

// failed is the summary of the rank whose failure ended the attempt, nil when no worker's failure did.
func (a *Attempt) failed() *RankSummary {
	v := a.Verdict
	if v == nil || v.Reason != attempt.StopFailure || v.Failure == nil {
		return nil
	}
	for i, s := range a.Ranks {
		if s.Rank == v.Failure.Rank {
			return &a.Ranks[i]
		}
	}
	return nil
}

// writeRootCause writes the failed rank's status, the program, its last stderr lines and the traceback its error
// file holds.
func (r *Report) writeRootCause(w io.Writer, s *RankSummary) {
	fmt.Fprintf(w, "  root cause: rank %d (pid %d) %s\n", s.Rank, s.PID, s.Ended())
	if len(r.Program) > 0 {
		fmt.Fprintf(w, "  program: %s\n", programText(r.Program))
	}
	if len(s.StderrTail) > 0 {
		fmt.Fprintf(w, "  last stderr lines of rank %d:\n", s.Rank)
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

// LogAttempt logs the summary of one attempt as one record (for --log-format json): the same facts as
// WriteAttempt, as fields.
func (r *Report) LogAttempt(log *zap.Logger, a *Attempt) {
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
		rk := rank{Rank: s.Rank, PID: s.PID, Status: s.Ended(), WallMS: s.Wall.Milliseconds(), CPUMS: (s.UserCPU + s.SysCPU).Milliseconds(), PeakRSS: s.MaxRSS}
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
	s := a.failed()
	if s == nil {
		log.Info("attempt ended", fields...)
		return
	}
	fields = append(fields, zap.Int("root_cause_rank", s.Rank), zap.Strings("program", r.Program), zap.Strings("stderr_tail", s.StderrTail))
	if s.Error != nil {
		fields = append(fields, zap.String("error", s.Error.Message), zap.String("traceback", s.Error.Traceback))
	}
	log.Error("attempt ended", fields...)
}

// SummaryPrinter prints each attempt's summary once, when it ends (an Observer of AttemptEnded): attempt 0's
// failure is shown before the restart runs attempt 1, not after. Text goes to w (which must not block: a
// Console's LogWriter), or one record per attempt to log for --log-format json. Finish prints what is left.
type SummaryPrinter struct {
	w       io.Writer
	log     *zap.Logger // nil: text
	mu      sync.Mutex
	printed map[*Attempt]bool
}

// NewSummaryPrinter prints summaries as text on w, or, when log is not nil, as log records.
func NewSummaryPrinter(w io.Writer, log *zap.Logger) *SummaryPrinter {
	return &SummaryPrinter{w: w, log: log, printed: map[*Attempt]bool{}}
}

// Observe prints the attempt that just ended.
func (p *SummaryPrinter) Observe(e Event) {
	if e.Kind == AttemptEnded && e.Ended != nil && e.Report != nil {
		p.print(e.Report, e.Ended)
	}
}

// Finish prints every attempt of rep not printed yet.
func (p *SummaryPrinter) Finish(rep *Report) {
	for _, a := range rep.Attempts {
		if a != nil {
			p.print(rep, a)
		}
	}
}

func (p *SummaryPrinter) print(rep *Report, a *Attempt) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed[a] || a.Verdict == nil {
		return
	}
	p.printed[a] = true
	if p.log != nil {
		rep.LogAttempt(p.log, a)
		return
	}
	rep.WriteAttempt(p.w, a)
}

// programText is the command line as the summary shows it, with the file its first word ran (python3 from PATH
// is /usr/bin/python3, say), at most 200 bytes of arguments.
func programText(p []string) string {
	args := strings.Join(p[1:], " ")
	if len(args) > 200 {
		args = args[:200] + "..."
	}
	first := p[0]
	if path, err := exec.LookPath(first); err == nil && path != first {
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
func cleanRanks(ranks []RankSummary) string {
	var ok []string
	for _, r := range ranks {
		if r.Signal == 0 && r.ExitCode == 0 {
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
