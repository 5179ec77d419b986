package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/internal/failure"
)

// TestOverdueCountsFromTheHurry: a write that has waited longer than d is overdue, but once the console is hurried
// the reader has d from then on: a write stalled for 10 s when a stop signal came was abandoned at once, and the
// reader that came back within the second lost its output.
func TestOverdueCountsFromTheHurry(t *testing.T) {
	now := time.Now()
	c := &Console{writing: true, since: now.Add(-10 * time.Second)}
	if !c.overdue(now, time.Second) {
		t.Error("a write waiting 10 s, not hurried: not overdue after 1 s")
	}
	c.hurriedAt = now.Add(-500 * time.Millisecond)
	if c.overdue(now, time.Second) {
		t.Error("hurried 0.5 s ago: overdue after 1 s, counting from the write's start")
	}
	c.hurriedAt = now.Add(-1500 * time.Millisecond)
	if !c.overdue(now, time.Second) {
		t.Error("hurried 1.5 s ago: not overdue after 1 s")
	}
	c.writing = false
	if c.overdue(now, time.Second) {
		t.Error("no write in progress: overdue")
	}
}

// TestStopUnblocksAWriter: a writer blocked on a full console whose reader never reads returns once a stop signal
// came (Stop: within AfterStop), and Flush then says what the output was lost to.
func TestStopUnblocksAWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := NewConsole("stdout", w)
	defer func() {
		r.Close() // the stalled write fails: the writer goroutine ends
		c.Close()
		w.Close()
	}()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		chunk := make([]byte, 64<<10)
		for range 2 * consoleQueue / len(chunk) { // twice what the console holds: the writer blocks
			_, _ = c.Write(chunk)
		}
	}()
	// Waits for an event (the console full, its writer blocked in its write to the pipe), not a time: the console
	// tells nobody that its writer blocked, so the test polls its state every millisecond until it is so, or fails
	// after a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		c.mu.Lock()
		full := c.queued >= consoleQueue && c.writing
		c.mu.Unlock()
		if full {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the console never filled")
		}
		time.Sleep(time.Millisecond)
	}
	Stop(syscall.SIGTERM, c)
	select {
	case <-wrote:
	case <-time.After(time.Minute):
		t.Fatal("the writer still blocked a minute after the stop")
	}
	var se *failure.SignalError
	if err := c.Flush(); !errors.As(err, &se) || se.Signal != syscall.SIGTERM {
		t.Fatalf("Flush after the stop: %v, want a SignalError for SIGTERM", err)
	}
}

// TestLoggerRecordsHaveUniqueKeys: a key the logger's context has, or that a record gives twice, appears once in
// the JSON record (the first value): the rendezvous logs "job closed" with the run id on a job's logger that
// carries it already. A namespace's fields are its own.
func TestLoggerRecordsHaveUniqueKeys(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger("json", zapcore.InfoLevel, &b)
	if err != nil {
		t.Fatal(err)
	}
	job := log.With(zap.String("run_id", "job-1"))
	job.Info("rendezvous: job closed", zap.String("run_id", "job-1"), zap.Int("generation", 2), zap.Int("generation", 3))
	job.With(zap.String("run_id", "other"), zap.String("rdzv_backend", "tcp")).Info("nested", zap.Namespace("peer"), zap.String("run_id", "peer-run"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(lines), b.String())
	}
	for i, want := range []string{`"run_id":"job-1"`, `"run_id":"job-1"`} {
		if n := strings.Count(lines[i], `"run_id":`); n != map[int]int{0: 1, 1: 2}[i] || !strings.Contains(lines[i], want) {
			t.Errorf("record %d: %d run_id keys (want %d, the first value kept):\n%s", i, n, map[int]int{0: 1, 1: 2}[i], lines[i])
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("record %d is not JSON: %v\n%s", i, err, lines[i])
		}
	}
	if strings.Count(lines[0], `"generation":`) != 1 || !strings.Contains(lines[0], `"generation":2`) {
		t.Errorf("a key given twice in one record is kept once, the first: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"peer":{"run_id":"peer-run"}`) || !strings.Contains(lines[1], `"rdzv_backend":"tcp"`) {
		t.Errorf("a namespace's own run_id, or a new key of the context, was dropped: %s", lines[1])
	}
}
