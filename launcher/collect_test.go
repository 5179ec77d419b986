package launcher_test

import (
	"bytes"
	"strings"
	"syscall"
	"testing"

	"tpurun/launcher"
	"tpurun/launcher/results"
)

func TestResultExitsInEndOrder(t *testing.T) {
	a := &launcher.Attempt{
		Ranks: []launcher.RankSummary{
			{Rank: 0, PID: 10, ExitCode: 0},
			{Rank: 1, PID: 11, ExitCode: -1, Signal: syscall.SIGKILL},
			{Rank: 2, PID: 12, ExitCode: 3},
			{Rank: 3, PID: 13, ExitCode: 0}, // never seen ending: goes last
		},
		EndOrder: []int{2, 1, 0},
	}
	got := a.ResultExits()
	want := []results.RankExit{{Rank: 2, PID: 12, ExitCode: 3}, {Rank: 1, PID: 11, ExitCode: 137, Signal: "SIGKILL"},
		{Rank: 0, PID: 10}, {Rank: 3, PID: 13}}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("exit %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestWriteResultsSummary(t *testing.T) {
	doc := &results.Document{
		Violations: []results.Violation{{Kind: "duplicate_result", Message: "2 results for replica 0: rank 0 pid 1 and rank 1 pid 2", Hint: "SPMD"}},
		Results: []results.Result{{Replica: 0, OK: true}, {Replica: 1, Rank: 1, PID: 2,
			Error: &results.ErrorInfo{Type: "ValueError", Message: "boom", Traceback: "Traceback:\n  line 3\nValueError: boom\n"}}},
	}
	var b bytes.Buffer
	launcher.WriteResultsSummary(&b, nil, doc, true)
	for _, want := range []string{"results: duplicate_result: 2 results for replica 0", "hint: SPMD",
		"root cause: replica 1 (rank 1, pid 2) raised ValueError: boom", "    line 3"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset() // with the document printed (--json): the error named once, its traceback left to the document
	launcher.WriteResultsSummary(&b, nil, doc, false)
	if s := b.String(); !strings.Contains(s, "raised ValueError: boom") || strings.Contains(s, "line 3") {
		t.Fatalf("summary without tracebacks:\n%s", s)
	}
	b.Reset()
	launcher.WriteResultsSummary(&b, nil, &results.Document{Results: []results.Result{{OK: true}}}, true)
	if b.Len() != 0 {
		t.Fatalf("clean document wrote %q", b.String())
	}
}
