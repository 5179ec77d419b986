package console

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

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
