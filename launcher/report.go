package launcher

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"tpurun/launcher/results"
)

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, and on node
// 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Program  []string // the command every worker ran (the interpreter first for a Python program)
	Attempts []*Attempt
	Results  *results.Document
}

// StopReason says why an attempt ended the way it did.
type StopReason string

// The reasons an attempt stopped.
const (
	StopDone     StopReason = "done"     // every worker exited on its own
	StopFailure  StopReason = "failure"  // a worker failed; the rest were stopped
	StopSignal   StopReason = "signal"   // the launcher received a terminating signal
	StopTimeout  StopReason = "timeout"  // --timeout expired
	StopCanceled StopReason = "canceled" // the caller's context was canceled
)

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Reason  StopReason
	Signal  syscall.Signal // the signal the launcher received, for StopSignal
	Failure *WorkerError   // the first worker that failed, nil if none
	Ranks   []RankSummary  // in local-rank order
	Swept   []int          // pids the orphan sweep had to kill
	LogDir  string         // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

	EndOrder []int // ranks in the order their processes ended (for the results document's exit code)
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

// WriteSummary writes the per-rank exit summary of every attempt and, for a failed attempt, the root cause:
// the failing rank's last stderr lines and the traceback from its error file.
func (r *Report) WriteSummary(w io.Writer) {
	for _, a := range r.Attempts {
		head := fmt.Sprintf("tpurun: run %s attempt %d: %s", r.RunID, a.Number, a.Reason)
		if a.Reason == StopSignal {
			head += " " + SignalName(a.Signal)
		}
		if a.Failure != nil {
			head += ": " + a.Failure.Error()
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
		if a.Failure == nil {
			continue
		}
		for _, s := range a.Ranks {
			if s.Rank != a.Failure.Rank {
				continue
			}
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
