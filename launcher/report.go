package launcher

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"tpurun/launcher/results"
)

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, the job's
// verdict, and on node 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Attempts []*Attempt
	Results  *results.Document
	Verdict  *Verdict // how the job ended; never nil once Run returns a report
}

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Verdict *Verdict      // how this attempt ended (its reason, exit code, root cause)
	Ranks   []RankSummary // in local-rank order
	Swept   []int         // pids the orphan sweep had to kill
	LogDir  string        // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

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
		return SignalName(r.Signal)
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

// WriteSummary writes the per-rank exit summary of every attempt, headed by its verdict, and, for an attempt that
// a worker's failure ended, the root cause: the failing rank's last stderr lines and the traceback from its error
// file. A stop (a signal, the timeout, another node) is never shown as a worker's failure.
func (r *Report) WriteSummary(w io.Writer) {
	for _, a := range r.Attempts {
		v := a.Verdict
		head := fmt.Sprintf("tpurun: run %s attempt %d: %s: %s", r.RunID, a.Number, v.Reason, v.Summary())
		if v.Reason != StopDone && v.Reason != StopFailure {
			if clean := cleanRanks(a.Ranks); clean != "" {
				head += "; " + clean
			}
		}
		fmt.Fprintln(w, head)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  RANK\tPID\tSTATUS\tWALL\tCPU\tPEAK RSS")
		for _, s := range a.Ranks {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\n", s.Rank, s.PID, s.Ended(),
				s.Wall.Round(time.Millisecond), (s.UserCPU + s.SysCPU).Round(time.Millisecond), bytesText(s.MaxRSS))
		}
		_ = tw.Flush()
		if len(a.Swept) > 0 {
			fmt.Fprintf(w, "  orphan sweep killed pids %v that still carried TPURUN_RUN_ID=%s\n", a.Swept, r.RunID)
		}
		for _, s := range a.Ranks {
			if s.ResultErr != nil {
				fmt.Fprintf(w, "  rank %d results: %v\n", s.Rank, s.ResultErr)
			}
		}
		if v.Reason == StopFailure && v.Failure != nil {
			writeRootCause(w, a, v.Failure.Rank)
		}
	}
}

// writeRootCause writes the failed rank's status, last stderr lines and the traceback its error file holds.
func writeRootCause(w io.Writer, a *Attempt, rank int) {
	for _, s := range a.Ranks {
		if s.Rank != rank {
			continue
		}
		fmt.Fprintf(w, "  root cause: rank %d (pid %d) %s\n", s.Rank, s.PID, s.Ended())
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
