// Package launcher owns the supervision of one run on one host: a Plan in, processes out. It starts one worker
// per planned rank with its environment, streams and prefixes their output, fails fast when one fails, forwards
// signals, restarts the group when asked, collects results and writes the exit report.
//
// Control (docs/CONTROL.md): one stop controller per run (control.go) is the only reader of signals and timers
// and owns every reason to stop — a signal, --timeout, a failing rank, another node or the rendezvous store, a
// console write error, the caller's context — in every phase: the join, the barrier, the attempt, the exchange
// of outcomes, between generations. An attempt is a state machine (machine.go: starting → running → stopping →
// killing → sweeping → draining → done), carried out by a supervisor on the controller's goroutine
// (supervise.go). How an attempt and the job ended is one Verdict (verdict.go), from which the exit code, the
// summary line and the root cause derive. The signal policy is signals.go; terminal and stdin, terminal.go.
package launcher
