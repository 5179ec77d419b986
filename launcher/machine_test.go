package launcher

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/launcher/failure"
)

// The machine of an attempt, transition by transition, without a process, a timer or a goroutine: every phase
// is reached by a short history of events, then one event is applied and the phase it leads to and the actions
// it asks for are compared with the table.

var (
	failure1 = &failure.WorkerError{Rank: 1, PID: 42, ExitCode: 3}
	remote   = &cause{reason: StopRemote, sig: syscall.SIGTERM, node: 2, msg: "rank 5 exited 1"}
	sigterm  = signalCause(syscall.SIGTERM)
)

// histories reach each phase with two workers.
var histories = map[phase][]event{
	phaseStarting: {{kind: evAdded}},
	phaseRunning:  {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}},
	phaseStopping: {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evStop, cause: sigterm}},
	phaseKilling:  {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evStop, cause: sigterm}, {kind: evGrace}},
	phaseSweeping: {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evExited}, {kind: evExited}},
	phaseDraining: {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evExited}, {kind: evExited}, {kind: evOrphansGone}},
	phaseDone: {{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evExited}, {kind: evExited}, {kind: evOrphansGone},
		{kind: evSwept}, {kind: evDrained}},
}

func machineIn(t *testing.T, p phase) *attemptMachine {
	t.Helper()
	m := newMachine(7 * time.Second)
	for _, e := range histories[p] {
		m.handle(e)
	}
	if m.phase != p {
		t.Fatalf("history of %s reached %s", p, m.phase)
	}
	return m
}

var actNames = map[actKind]string{actSignal: "signal", actSignalNew: "signal-new", actKill: "kill", actArmGrace: "arm-grace",
	actFailed: "failed", actAnnounce: "announce", actHurry: "hurry", actAbandon: "abandon", actTermOrphans: "term-orphans",
	actSweep: "sweep", actDrain: "drain", actSettle: "settle"}

func actsText(acts []action) string {
	var out []string
	for _, a := range acts {
		s := actNames[a.kind]
		if a.sig != 0 {
			s += ":" + failure.SignalName(a.sig)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestAttemptTransitions(t *testing.T) {
	for _, tc := range []struct {
		from phase
		e    event
		to   phase
		acts string
	}{
		// starting: workers are being started
		{phaseStarting, event{kind: evAdded}, phaseStarting, ""},
		{phaseStarting, event{kind: evStarted}, phaseRunning, ""},
		{phaseStarting, event{kind: evExited}, phaseStarting, ""},
		{phaseStarting, event{kind: evExited, failed: failure1}, phaseStopping, "failed announce signal:SIGTERM arm-grace"},
		{phaseStarting, event{kind: evStop, cause: sigterm}, phaseStopping, "announce signal:SIGTERM arm-grace"},
		{phaseStarting, event{kind: evStop, cause: remote}, phaseStopping, "signal:SIGTERM arm-grace"},
		{phaseStarting, event{kind: evForward, sig: syscall.SIGUSR1}, phaseStarting, "signal:SIGUSR1"},
		{phaseStarting, event{kind: evSecondStop, sig: syscall.SIGINT, why: "second SIGINT"}, phaseKilling, "kill hurry"},
		// running: every worker started
		{phaseRunning, event{kind: evExited}, phaseRunning, ""},
		{phaseRunning, event{kind: evExited, failed: failure1}, phaseStopping, "failed announce signal:SIGTERM arm-grace"},
		{phaseRunning, event{kind: evStop, cause: signalCause(syscall.SIGINT)}, phaseStopping, "announce signal:SIGINT arm-grace"},
		{phaseRunning, event{kind: evStop, cause: signalCause(syscall.SIGQUIT)}, phaseStopping, "announce signal:SIGQUIT arm-grace"},
		{phaseRunning, event{kind: evStop, cause: remote}, phaseStopping, "signal:SIGTERM arm-grace"},
		{phaseRunning, event{kind: evStop, cause: errCause(StopTimeout, nil)}, phaseStopping, "announce signal:SIGTERM arm-grace"},
		{phaseRunning, event{kind: evForward, sig: syscall.SIGHUP}, phaseRunning, "signal:SIGHUP"},
		{phaseRunning, event{kind: evSecondStop, why: "--timeout 1s expired"}, phaseRunning, ""},
		{phaseRunning, event{kind: evGrace}, phaseRunning, ""},
		// stopping: the stop signal went out, the grace runs
		{phaseStopping, event{kind: evAdded}, phaseStopping, "signal-new:SIGTERM"},
		{phaseStopping, event{kind: evExited}, phaseStopping, ""},
		{phaseStopping, event{kind: evExited, failed: failure1}, phaseStopping, ""}, // a consequence, not a failure
		{phaseStopping, event{kind: evStop, cause: failureCause(failure1)}, phaseStopping, ""},
		{phaseStopping, event{kind: evForward, sig: syscall.SIGUSR2}, phaseStopping, "signal:SIGUSR2"},
		{phaseStopping, event{kind: evGrace}, phaseKilling, "kill"},
		{phaseStopping, event{kind: evSecondStop, sig: syscall.SIGTERM, why: "second SIGTERM"}, phaseKilling, "kill hurry"},
		// killing: SIGKILL went out
		{phaseKilling, event{kind: evAdded}, phaseKilling, "signal-new:SIGKILL"},
		{phaseKilling, event{kind: evExited}, phaseKilling, ""},
		{phaseKilling, event{kind: evGrace}, phaseKilling, ""},
		{phaseKilling, event{kind: evSecondStop, sig: syscall.SIGTERM, why: "second SIGTERM"}, phaseKilling, "hurry"},
		{phaseKilling, event{kind: evForward, sig: syscall.SIGUSR1}, phaseKilling, "signal:SIGUSR1"},
		// sweeping: every worker exited; what they left gets SIGTERM and the rest of the grace
		{phaseSweeping, event{kind: evOrphansGone}, phaseDraining, "sweep"},
		{phaseSweeping, event{kind: evGrace}, phaseDraining, "sweep"},
		{phaseSweeping, event{kind: evStop, cause: sigterm}, phaseDraining, "sweep"},
		{phaseSweeping, event{kind: evStop, cause: remote}, phaseSweeping, ""},
		{phaseSweeping, event{kind: evSecondStop, sig: syscall.SIGINT, why: "second SIGINT"}, phaseDraining, "sweep hurry"},
		{phaseSweeping, event{kind: evForward, sig: syscall.SIGUSR1}, phaseSweeping, ""},
		// draining: SIGKILL sweep, then the pipes to EOF
		{phaseDraining, event{kind: evSwept}, phaseDraining, "drain"},
		{phaseDraining, event{kind: evDrained}, phaseDone, "settle"},
		{phaseDraining, event{kind: evStop, cause: sigterm}, phaseDraining, "abandon"},
		{phaseDraining, event{kind: evStop, cause: remote}, phaseDraining, ""},
		{phaseDraining, event{kind: evSecondStop, sig: syscall.SIGTERM, why: "second SIGTERM"}, phaseDraining, "abandon"},
		{phaseDraining, event{kind: evGrace}, phaseDraining, ""},
		// done: nothing moves it
		{phaseDone, event{kind: evStop, cause: sigterm}, phaseDone, ""},
		{phaseDone, event{kind: evSecondStop, sig: syscall.SIGTERM, why: "second SIGTERM"}, phaseDone, ""},
		{phaseDone, event{kind: evDrained}, phaseDone, ""},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.from, tc.e.kind), func(t *testing.T) {
			m := machineIn(t, tc.from)
			acts := m.handle(tc.e)
			if m.phase != tc.to || actsText(acts) != tc.acts {
				t.Fatalf("%s + event %d: %s [%s], want %s [%s]", tc.from, tc.e.kind, m.phase, actsText(acts), tc.to, tc.acts)
			}
		})
	}
}

// TestAttemptPaths: whole attempts, event by event, and the verdict each leaves.
func TestAttemptPaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  []event
		acts    string // every action, in order
		reason  StopReason
		code    int
		escaped string
	}{
		{"success, nothing left behind", []event{{kind: evAdded}, {kind: evAdded}, {kind: evStarted}, {kind: evExited}, {kind: evExited},
			{kind: evOrphansGone}, {kind: evSwept}, {kind: evDrained}},
			"term-orphans sweep drain settle", StopDone, 0, ""},
		{"failure, the others end on SIGTERM", []event{{kind: evAdded}, {kind: evAdded}, {kind: evStarted},
			{kind: evExited, failed: failure1}, {kind: evExited}, {kind: evOrphansGone}, {kind: evSwept}, {kind: evDrained}},
			"failed announce signal:SIGTERM arm-grace term-orphans sweep drain settle", StopFailure, 3, ""},
		{"SIGTERM, workers exit 0: still 143", []event{{kind: evAdded}, {kind: evStarted}, {kind: evStop, cause: sigterm},
			{kind: evExited}, {kind: evOrphansGone}, {kind: evSwept}, {kind: evDrained}},
			"announce signal:SIGTERM arm-grace term-orphans sweep drain settle", StopSignal, 143, ""},
		{"SIGINT, grace expires", []event{{kind: evAdded}, {kind: evStarted}, {kind: evStop, cause: signalCause(syscall.SIGINT)},
			{kind: evGrace}, {kind: evExited, failed: &failure.WorkerError{Rank: 0, ExitCode: -1, Signal: syscall.SIGKILL}}, {kind: evSwept}, {kind: evDrained}},
			"announce signal:SIGINT arm-grace kill sweep drain settle", StopSignal, 130, "grace 7s expired"},
		{"second SIGTERM", []event{{kind: evAdded}, {kind: evStarted}, {kind: evStop, cause: sigterm},
			{kind: evSecondStop, sig: syscall.SIGTERM, why: "second SIGTERM"}, {kind: evExited}, {kind: evSwept}, {kind: evDrained}},
			"announce signal:SIGTERM arm-grace kill hurry sweep drain settle", StopSignal, 143, "second SIGTERM"},
		{"start failure after one worker", []event{{kind: evAdded}, {kind: evStop, cause: errCause(StopStart, &failure.ProgramError{Program: "x", Err: syscall.ENOENT})},
			{kind: evStarted}, {kind: evExited}, {kind: evOrphansGone}, {kind: evSwept}, {kind: evDrained}},
			"announce signal:SIGTERM arm-grace term-orphans sweep drain settle", StopStart, 127, ""},
		{"every worker exits during the start", []event{{kind: evAdded}, {kind: evExited}, {kind: evAdded}, {kind: evExited},
			{kind: evStarted}, {kind: evOrphansGone}, {kind: evSwept}, {kind: evDrained}},
			"term-orphans sweep drain settle", StopDone, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(7 * time.Second)
			var all []action
			for _, e := range tc.events {
				all = append(all, m.handle(e)...)
			}
			v := m.cause.verdict(0, time.Second, m.escalated)
			if got := actsText(all); got != tc.acts || m.phase != phaseDone {
				t.Fatalf("actions %q (phase %s), want %q (done)", got, m.phase, tc.acts)
			}
			if v.Reason != tc.reason || v.Code != tc.code || v.Escalated != tc.escaped {
				t.Fatalf("verdict %s %d %q (%s), want %s %d %q", v.Reason, v.Code, v.Escalated, v.Summary(), tc.reason, tc.code, tc.escaped)
			}
		})
	}
}

// TestSignalPolicyTable: the table of docs/CONTROL.md, signal by signal.
func TestSignalPolicyTable(t *testing.T) {
	want := map[sigPolicy][]syscall.Signal{
		policyStop:     {syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT},
		policyJobStop:  {syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU},
		policyContinue: {syscall.SIGCONT},
		policyOwn:      {syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGPROF},
		policyNone:     {syscall.SIGKILL, syscall.SIGSTOP, 32, 33, 34},
	}
	listed := map[syscall.Signal]bool{}
	for p, sigs := range want {
		for _, s := range sigs {
			listed[s] = true
			if got := policyOf(s); got != p {
				t.Errorf("%s: policy %d, want %d", failure.SignalName(s), got, p)
			}
		}
	}
	for n := 1; n <= 64; n++ {
		if s := syscall.Signal(n); !listed[s] && policyOf(s) != policyForward {
			t.Errorf("%s: policy %d, want forwarded", failure.SignalName(s), policyOf(s))
		}
	}
	caught := CaughtSignals()
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGWINCH, 35, 64} {
		if !slices.Contains(caught, os.Signal(s)) {
			t.Errorf("%s is not caught", failure.SignalName(s))
		}
	}
	for _, s := range []syscall.Signal{syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGKILL, 33} {
		if slices.Contains(caught, os.Signal(s)) {
			t.Errorf("%s is caught", failure.SignalName(s))
		}
	}
}
