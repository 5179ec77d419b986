package attempt

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/stop"
)

// The machine of an attempt, transition by transition, without a process, a timer or a goroutine: every phase
// is reached by a short history of events, then one event is applied and the phase it leads to and the actions
// it asks for are compared with the table.

var (
	failure1 = &proc.WorkerError{Rank: 1, Exit: proc.Exit{PID: 42, ExitCode: 3}}
	remote   = &stop.Cause{Reason: stop.Remote, Signal: syscall.SIGTERM, Node: 2, Message: "rank 5 exited 1"}
	sigterm  = stop.SignalCause(syscall.SIGTERM)
)

// histories reach each phase with two workers.
var histories = map[Phase][]Event{
	Starting: {{Kind: EvAdded}},
	Running:  {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}},
	Stopping: {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvStop, Cause: sigterm}},
	Killing:  {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvStop, Cause: sigterm}, {Kind: EvGrace}},
	Sweeping: {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvExited}, {Kind: EvExited}},
	Draining: {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvExited}, {Kind: EvExited}, {Kind: EvOrphansGone}},
	Done: {{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvExited}, {Kind: EvExited}, {Kind: EvOrphansGone},
		{Kind: EvDrained}},
}

func machineIn(t *testing.T, p Phase) *Machine {
	t.Helper()
	m := NewMachine(7 * time.Second)
	for _, e := range histories[p] {
		m.Handle(e)
	}
	if m.phase != p {
		t.Fatalf("history of %s reached %s", p, m.phase)
	}
	return m
}

var actNames = map[ActionKind]string{ActSignal: "signal", ActSignalNew: "signal-new", ActKill: "kill", ActArmGrace: "arm-grace",
	ActFailed: "failed", ActAnnounce: "announce", ActHurry: "hurry", ActAbandon: "abandon", ActTermOrphans: "term-orphans",
	ActSweep: "sweep", ActSettle: "settle"}

func actsText(acts []Action) string {
	var out []string
	for _, a := range acts {
		s := actNames[a.Kind]
		if a.Signal != 0 {
			s += ":" + failure.SignalName(a.Signal)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestAttemptTransitions(t *testing.T) {
	for _, tc := range []struct {
		from Phase
		e    Event
		to   Phase
		acts string
	}{
		// starting: workers are being started
		{Starting, Event{Kind: EvAdded}, Starting, ""},
		{Starting, Event{Kind: EvStarted}, Running, ""},
		{Starting, Event{Kind: EvExited}, Starting, ""},
		{Starting, Event{Kind: EvExited, Failed: failure1}, Stopping, "failed announce signal:SIGTERM arm-grace"},
		{Starting, Event{Kind: EvStop, Cause: sigterm}, Stopping, "announce signal:SIGTERM arm-grace"},
		{Starting, Event{Kind: EvStop, Cause: remote}, Stopping, "signal:SIGTERM arm-grace"},
		{Starting, Event{Kind: EvForward, Signal: syscall.SIGUSR1}, Starting, "signal:SIGUSR1"},
		{Starting, Event{Kind: EvSecondStop, Signal: syscall.SIGINT, Why: "second SIGINT"}, Killing, "kill hurry"},
		// running: every worker started
		{Running, Event{Kind: EvExited}, Running, ""},
		{Running, Event{Kind: EvExited, Failed: failure1}, Stopping, "failed announce signal:SIGTERM arm-grace"},
		{Running, Event{Kind: EvStop, Cause: stop.SignalCause(syscall.SIGINT)}, Stopping, "announce signal:SIGINT arm-grace"},
		{Running, Event{Kind: EvStop, Cause: stop.SignalCause(syscall.SIGQUIT)}, Stopping, "announce signal:SIGQUIT arm-grace"},
		{Running, Event{Kind: EvStop, Cause: remote}, Stopping, "signal:SIGTERM arm-grace"},
		{Running, Event{Kind: EvStop, Cause: stop.ErrCause(stop.Timeout, nil)}, Stopping, "announce signal:SIGTERM arm-grace"},
		{Running, Event{Kind: EvForward, Signal: syscall.SIGHUP}, Running, "signal:SIGHUP"},
		{Running, Event{Kind: EvSecondStop, Why: "--timeout 1s expired"}, Running, ""},
		{Running, Event{Kind: EvGrace}, Running, ""},
		// stopping: the stop signal went out, the grace runs
		{Stopping, Event{Kind: EvAdded}, Stopping, "signal-new:SIGTERM"},
		{Stopping, Event{Kind: EvExited}, Stopping, ""},
		{Stopping, Event{Kind: EvExited, Failed: failure1}, Stopping, ""}, // a consequence, not a failure
		{Stopping, Event{Kind: EvStop, Cause: stop.FailureCause(failure1)}, Stopping, ""},
		{Stopping, Event{Kind: EvForward, Signal: syscall.SIGUSR2}, Stopping, "signal:SIGUSR2"},
		{Stopping, Event{Kind: EvGrace}, Killing, "kill"},
		{Stopping, Event{Kind: EvSecondStop, Signal: syscall.SIGTERM, Why: "second SIGTERM"}, Killing, "kill hurry"},
		// killing: SIGKILL went out
		{Killing, Event{Kind: EvAdded}, Killing, "signal-new:SIGKILL"},
		{Killing, Event{Kind: EvExited}, Killing, ""},
		{Killing, Event{Kind: EvGrace}, Killing, ""},
		{Killing, Event{Kind: EvSecondStop, Signal: syscall.SIGTERM, Why: "second SIGTERM"}, Killing, "hurry"},
		{Killing, Event{Kind: EvForward, Signal: syscall.SIGUSR1}, Killing, "signal:SIGUSR1"},
		// sweeping: every worker exited; what they left gets SIGTERM and the rest of the grace
		{Sweeping, Event{Kind: EvOrphansGone}, Draining, "sweep"},
		{Sweeping, Event{Kind: EvGrace}, Draining, "sweep"},
		{Sweeping, Event{Kind: EvStop, Cause: sigterm}, Draining, "sweep hurry"},
		{Sweeping, Event{Kind: EvStop, Cause: remote}, Sweeping, ""},
		{Sweeping, Event{Kind: EvSecondStop, Signal: syscall.SIGINT, Why: "second SIGINT"}, Draining, "sweep hurry"},
		{Sweeping, Event{Kind: EvForward, Signal: syscall.SIGUSR1}, Sweeping, ""},
		// draining: SIGKILL sweep, then the pipes to EOF
		{Draining, Event{Kind: EvDrained}, Done, "settle"},
		{Draining, Event{Kind: EvStop, Cause: sigterm}, Draining, "abandon"},
		{Draining, Event{Kind: EvStop, Cause: remote}, Draining, ""},
		{Draining, Event{Kind: EvSecondStop, Signal: syscall.SIGTERM, Why: "second SIGTERM"}, Draining, "abandon"},
		{Draining, Event{Kind: EvGrace}, Draining, ""},
		// done: nothing moves it
		{Done, Event{Kind: EvStop, Cause: sigterm}, Done, ""},
		{Done, Event{Kind: EvSecondStop, Signal: syscall.SIGTERM, Why: "second SIGTERM"}, Done, ""},
		{Done, Event{Kind: EvDrained}, Done, ""},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.from, tc.e.Kind), func(t *testing.T) {
			m := machineIn(t, tc.from)
			acts := m.Handle(tc.e)
			if m.phase != tc.to || actsText(acts) != tc.acts {
				t.Fatalf("%s + event %d: %s [%s], want %s [%s]", tc.from, tc.e.Kind, m.phase, actsText(acts), tc.to, tc.acts)
			}
		})
	}
}

// TestAttemptPaths: whole attempts, event by event, and the verdict each leaves.
func TestAttemptPaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  []Event
		acts    string // every action, in order
		reason  stop.Reason
		code    int
		escaped string
	}{
		{"success, nothing left behind", []Event{{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvExited}, {Kind: EvExited},
			{Kind: EvOrphansGone}, {Kind: EvDrained}},
			"term-orphans sweep settle", stop.Done, 0, ""},
		{"failure, the others end on SIGTERM", []Event{{Kind: EvAdded}, {Kind: EvAdded}, {Kind: EvStarted},
			{Kind: EvExited, Failed: failure1}, {Kind: EvExited}, {Kind: EvOrphansGone}, {Kind: EvDrained}},
			"failed announce signal:SIGTERM arm-grace term-orphans sweep settle", stop.Failure, 3, ""},
		{"SIGTERM, workers exit 0: still 143", []Event{{Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvStop, Cause: sigterm},
			{Kind: EvExited}, {Kind: EvOrphansGone}, {Kind: EvDrained}},
			"announce signal:SIGTERM arm-grace term-orphans sweep settle", stop.Signal, 143, ""},
		{"SIGINT, grace expires", []Event{{Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvStop, Cause: stop.SignalCause(syscall.SIGINT)},
			{Kind: EvGrace}, {Kind: EvExited, Failed: &proc.WorkerError{Rank: 0, Exit: proc.Exit{ExitCode: -1, Signal: syscall.SIGKILL}}}, {Kind: EvDrained}},
			"announce signal:SIGINT arm-grace kill sweep settle", stop.Signal, 130, "grace 7s expired"},
		{"second SIGTERM", []Event{{Kind: EvAdded}, {Kind: EvStarted}, {Kind: EvStop, Cause: sigterm},
			{Kind: EvSecondStop, Signal: syscall.SIGTERM, Why: "second SIGTERM"}, {Kind: EvExited}, {Kind: EvDrained}},
			"announce signal:SIGTERM arm-grace kill hurry sweep settle", stop.Signal, 143, "second SIGTERM"},
		{"start failure after one worker", []Event{{Kind: EvAdded}, {Kind: EvStop, Cause: stop.ErrCause(stop.Start, &failure.ProgramError{Program: "x", Err: syscall.ENOENT})},
			{Kind: EvStarted}, {Kind: EvExited}, {Kind: EvOrphansGone}, {Kind: EvDrained}},
			"announce signal:SIGTERM arm-grace term-orphans sweep settle", stop.Start, 127, ""},
		{"every worker exits during the start", []Event{{Kind: EvAdded}, {Kind: EvExited}, {Kind: EvAdded}, {Kind: EvExited},
			{Kind: EvStarted}, {Kind: EvOrphansGone}, {Kind: EvDrained}},
			"term-orphans sweep settle", stop.Done, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMachine(7 * time.Second)
			var all []Action
			for _, e := range tc.events {
				all = append(all, m.Handle(e)...)
			}
			v := m.cause.Verdict(0, time.Second, m.escalated)
			if got := actsText(all); got != tc.acts || m.phase != Done {
				t.Fatalf("actions %q (phase %s), want %q (done)", got, m.phase, tc.acts)
			}
			if v.Reason != tc.reason || v.Code != tc.code || v.Escalated != tc.escaped {
				t.Fatalf("verdict %s %d %q (%s), want %s %d %q", v.Reason, v.Code, v.Escalated, v.Summary(), tc.reason, tc.code, tc.escaped)
			}
		})
	}
}
