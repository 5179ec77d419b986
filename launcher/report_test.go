package launcher_test

import (
	"syscall"
	"testing"

	"tpurun/internal/attempt"
	"tpurun/internal/proc"
	"tpurun/internal/results"
)

func TestResultExitsInEndOrder(t *testing.T) {
	a := &attempt.Attempt{
		Ranks: []attempt.RankSummary{
			{Rank: 0, Exit: proc.Exit{PID: 10, ExitCode: 0}},
			{Rank: 1, Exit: proc.Exit{PID: 11, ExitCode: -1, Signal: syscall.SIGKILL}},
			{Rank: 2, Exit: proc.Exit{PID: 12, ExitCode: 3}},
			{Rank: 3, Exit: proc.Exit{PID: 13, ExitCode: 0}}, // never seen ending: goes last
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
