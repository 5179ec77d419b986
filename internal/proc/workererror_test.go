package proc_test

import (
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/proc"
)

// TestWorkerErrorTravels: a failed worker travels in the outcome the nodes exchange (a Verdict's Failure) as JSON.
// Its Exit keeps the names the fields had before WorkerError held one (so a node of either build reads the
// other's), carries the resource usage when known, and leaves out what is only this host's: the wait error and the
// clock.
func TestWorkerErrorTravels(t *testing.T) {
	we := &proc.WorkerError{Rank: 3, Attempt: 1, Exit: proc.Exit{PID: 41, ExitCode: -1, Signal: syscall.SIGKILL,
		Wall: 2 * time.Second, MaxRSS: 1 << 20, WaitErr: errors.New("local"), Finished: time.Now()}}
	b, err := json.Marshal(we)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "WaitErr") || strings.Contains(string(b), "Finished") {
		t.Fatalf("%s: carries this host's wait error or clock", b)
	}
	var got proc.WorkerError
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := *we
	want.WaitErr, want.Finished = nil, time.Time{}
	if got != want || got.ExitStatus() != 137 || got.Error() != we.Error() {
		t.Fatalf("%s read back as %+v, want %+v", b, got, want)
	}
	old := `{"Rank":1,"PID":42,"Attempt":0,"ExitCode":3,"Signal":0,"Wall":5000000}` // as a node before the one Exit wrote it
	got = proc.WorkerError{}
	if err := json.Unmarshal([]byte(old), &got); err != nil {
		t.Fatal(err)
	}
	if got.Rank != 1 || got.PID != 42 || got.ExitCode != 3 || got.Wall != 5*time.Millisecond || got.ExitStatus() != 3 {
		t.Fatalf("%s read as %+v", old, got)
	}
}
