package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
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

// checkForwarded feeds chunks through a forwarder and checks that the console got every segment (up to and
// including a newline or a carriage return) exactly once, each after the prefix, with the final partial segment
// flushed and terminated.
func checkForwarded(t *testing.T, chunks [][]byte) {
	t.Helper()
	var console, file bytes.Buffer
	var tl Tail
	f := &Forwarder{Prefix: []byte("[7] "), Console: &console, File: &file, Tail: &tl}
	var in []byte
	for _, c := range chunks {
		f.feed(c)
		in = append(in, c...)
	}
	f.flush()
	if !bytes.Equal(file.Bytes(), in) {
		t.Fatalf("log file got %d bytes, want the %d raw bytes", file.Len(), len(in))
	}
	want := in
	if len(want) > 0 && want[len(want)-1] != '\n' && want[len(want)-1] != '\r' {
		want = append(append([]byte(nil), want...), '\n')
	}
	var got []byte
	out := console.Bytes()
	for len(out) > 0 {
		if !bytes.HasPrefix(out, []byte("[7] ")) {
			t.Fatalf("console segment without prefix: %q", out[:min(len(out), 40)])
		}
		out = out[4:]
		i := bytes.IndexAny(out, "\r\n")
		if i < 0 {
			t.Fatalf("console output does not end in a newline or a carriage return")
		}
		seg := out[:i+1]
		if len(seg) > maxLine+1 {
			t.Fatalf("segment of %d bytes exceeds the %d cap", len(seg), maxLine)
		}
		got = append(got, seg...)
		out = out[i+1:]
	}
	if !bytes.Equal(got, want) && !longLinesSplit(in) {
		t.Fatalf("console content differs from the input:\n got %q\nwant %q", got, want)
	}
}

// longLinesSplit reports whether in has a segment longer than maxLine (those are emitted in capped pieces).
func longLinesSplit(in []byte) bool {
	for _, l := range bytes.FieldsFunc(in, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if len(l) >= maxLine {
			return true
		}
	}
	return false
}

func TestForwarderLines(t *testing.T) {
	long := strings.Repeat("y", 200<<10) // a 200 KiB line, longer than a pipe read
	for name, chunks := range map[string][]string{
		"empty":            {},
		"one line":         {"a\n"},
		"partial at end":   {"a\nb"},
		"split mid-line":   {"ab", "c\nd", "e\n"},
		"only newlines":    {"\n\n", "\n"},
		"long line pieces": {long[:64<<10], long[64<<10:], "\nnext\n"},
		"cr and nul":       {"a\r\x00b\n"},
		"progress bar":     {"\r1", "0%", "\r20%\r", "30%\r100%\n"},
		"crlf":             {"a\r\nb\r", "\n"},
		"ends in cr":       {"a\rb\r"},
	} {
		t.Run(name, func(t *testing.T) {
			var bs [][]byte
			for _, c := range chunks {
				bs = append(bs, []byte(c))
			}
			checkForwarded(t, bs)
		})
	}
}

func TestForwarderCapsEndlessLine(t *testing.T) {
	var console bytes.Buffer
	f := &Forwarder{Prefix: []byte("[0] "), Console: &console}
	chunk := bytes.Repeat([]byte("z"), readSize)
	for range 3 * maxLine / readSize {
		f.feed(chunk)
	}
	if len(f.pending) >= maxLine {
		t.Fatalf("pending grew to %d bytes, want < %d", len(f.pending), maxLine)
	}
	if n := bytes.Count(console.Bytes(), []byte("[0] ")); n != 3 {
		t.Fatalf("%d capped pieces emitted, want 3", n)
	}
}

// TestForwarderCarriageReturnEndsASegment: a progress bar's redraws (tqdm writes "\r" and the new text) reach the
// console as they come, each after the prefix, so the terminal shows the prefixed bar redrawn in place.
func TestForwarderCarriageReturnEndsASegment(t *testing.T) {
	var console bytes.Buffer
	f := &Forwarder{Prefix: []byte("[0] "), Console: &console}
	for i, c := range []string{"\r1/3", "\r2/3", "\r3/3\n"} {
		f.feed([]byte(c))
		want := []string{"[0] \r", "[0] \r[0] 1/3\r", "[0] \r[0] 1/3\r[0] 2/3\r[0] 3/3\n"}[i]
		if console.String() != want {
			t.Fatalf("after %q the console has %q, want %q", c, console.String(), want)
		}
	}
}

// TestForwarderShowsAPartialSegmentWhenIdle: with ShowPartial (a pipe's or a file's console), a prompt or
// "loading..." without a newline is shown after that long without more bytes, and the rest of its line continues
// it, without a second prefix. Without it, the partial segment waits for its end: lines stay whole.
func TestForwarderShowsAPartialSegmentWhenIdle(t *testing.T) {
	console := &syncBuffer{wrote: make(chan struct{}, 1)}
	f := &Forwarder{Prefix: []byte("[0] "), Console: console, ShowPartial: PartialAfter}
	written := time.Now()
	f.feed([]byte("loading..."))
	for console.String() != "[0] loading..." {
		select {
		case <-console.wrote:
		case <-time.After(testutil.Deadline()):
			t.Fatalf("the partial segment was not shown: console %q", console.String())
		}
	}
	if waited := time.Since(written); waited < PartialAfter {
		t.Fatalf("shown after %s, before PartialAfter (%s): a partial segment waits for more first", waited, PartialAfter)
	}
	f.feed([]byte(" done\nnext"))
	f.flush()
	if got, want := console.String(), "[0] loading... done\n[0] next\n"; got != want {
		t.Fatalf("console %q, want %q", got, want)
	}

	piped := &syncBuffer{wrote: make(chan struct{}, 1)}
	f = &Forwarder{Prefix: []byte("[0] "), Console: piped}
	f.feed([]byte("[a long line, the rest in the pipe yet"))
	if f.idle != nil || piped.String() != "" {
		t.Fatalf("without ShowPartial a partial segment was shown, or its flush armed: %q", piped.String())
	}
	f.feed([]byte("]\n"))
	if got, want := piped.String(), "[0] [a long line, the rest in the pipe yet]\n"; got != want {
		t.Fatalf("console %q, want the line whole %q", got, want)
	}
}

// TestForwarderRawKeepsTheBytes: without a prefix the console gets the worker's bytes as written, an unterminated
// last line included (torchrun's workers write to the console directly).
func TestForwarderRawKeepsTheBytes(t *testing.T) {
	var console bytes.Buffer
	f := &Forwarder{Console: &console}
	in := "a\r\nb\rc\n\x00d"
	for _, c := range []string{in[:3], in[3:6], in[6:]} {
		f.feed([]byte(c))
	}
	f.flush()
	if console.String() != in {
		t.Fatalf("console %q, want the bytes as written %q", console.String(), in)
	}
}

// syncBuffer is a console that tells each write on wrote (made by its maker, with room for one).
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTailLines(t *testing.T) {
	var tl Tail
	for i := range 3000 {
		tl.add([]byte(strings.Repeat("e", i%7) + "\n"))
	}
	tl.add([]byte("last words"))
	got := tl.Lines(3)
	if len(got) != 3 || got[2] != "last words" {
		t.Fatalf("tail %q", got)
	}
	if len(tl.buf) > tailSize {
		t.Fatalf("tail holds %d bytes, cap %d", len(tl.buf), tailSize)
	}
}

func FuzzForwarder(f *testing.F) {
	f.Add([]byte("a\nb"), 1)
	f.Add([]byte("\n\n\n"), 2)
	f.Add([]byte(""), 3)
	f.Add([]byte("no newline at all"), 4)
	f.Add(bytes.Repeat([]byte("x\n"), 1000), 7)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut <= 0 {
			cut = 1
		}
		var chunks [][]byte
		for len(in) > 0 {
			n := min(cut, len(in))
			chunks = append(chunks, in[:n])
			in = in[n:]
		}
		checkForwarded(t, chunks)
	})
}

// BenchmarkForwarder measures prefixing throughput for bursts of 80-byte lines (bytes/s of worker output).
func BenchmarkForwarder(b *testing.B) {
	chunk := bytes.Repeat([]byte(strings.Repeat("x", 79)+"\n"), readSize/80)
	f := &Forwarder{Prefix: []byte("[12] "), Console: io.Discard}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		f.feed(chunk)
	}
}

// unhashable is a writer whose dynamic type cannot be compared with ==.
type unhashable struct{ _ []string } // a slice field: == on it panics

func (u unhashable) Write(p []byte) (int, error) { return len(p), nil }

func TestSameWriter(t *testing.T) {
	var a, b bytes.Buffer
	for _, c := range []struct {
		x, y io.Writer
		want bool
	}{
		{&a, &a, true}, {&a, &b, false}, {nil, &a, false}, {&a, io.Discard, false},
		{unhashable{}, unhashable{}, false}, // must not panic
	} {
		if got := sameFile(c.x, c.y); got != c.want {
			t.Errorf("sameFile(%T, %T) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}

// parked counts the goroutines parked in the poller in fn.
func parked(fn string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(" [IO wait")) && bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// TestIdleForwardersHoldNoBuffer: the forwarders of workers whose pipes have nothing to say yet wait in the
// poller without a read buffer (each held 64 KiB from its start, hundreds of MiB for a thousand workers); once
// output comes they forward it, whole.
func TestIdleForwardersHoldNoBuffer(t *testing.T) {
	live := func() uint64 { // the heap in use, the pool's buffers (and their victim cache) dropped
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 64
	before := live()
	var d Drain
	var wg sync.WaitGroup
	var writers []*os.File
	outs := make([]*bytes.Buffer, n)
	for i := range n {
		r, w, err := Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		writers = append(writers, w)
		outs[i] = &bytes.Buffer{}
		f := &Forwarder{Prefix: []byte(fmt.Sprintf("[%d] ", i)), Console: outs[i]}
		wg.Go(func() { _ = f.Run(d.Reader(r)) })
	}
	testutil.Eventually(t, fmt.Sprintf("%d forwarders waiting in the poller", n), func() bool { return parked("(*Forwarder).Run") == n })
	if held := int64(live()) - int64(before); held >= n*readSize/4 {
		t.Fatalf("%d idle forwarders hold %d bytes of heap, want no %d-byte read buffer each", n, held, readSize)
	}
	for i, w := range writers {
		fmt.Fprintf(w, "line %d\npartial", i)
		w.Close()
	}
	wg.Wait()
	for i, out := range outs {
		if want := fmt.Sprintf("[%d] line %d\n[%d] partial\n", i, i, i); out.String() != want {
			t.Errorf("forwarder %d wrote %q, want %q", i, out.String(), want)
		}
	}
}

// TestConsoleReusesOnlyWrittenBuffers: the queue copies writes into buffers the writer is done with; nothing is
// reused while it is queued or being written. Writes of every size (a byte to 300 KiB, each its own bytes) through
// a reader that takes them one small piece at a time arrive exactly, in order.
func TestConsoleReusesOnlyWrittenBuffers(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4093)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	c := NewConsole("stdout", w)
	var want bytes.Buffer
	pattern := make([]byte, 300<<10+251)
	for j := range pattern {
		pattern[j] = byte(j*31 + j/7)
	}
	for i := range 400 {
		p := pattern[i%251:][:1+i*i*7919%(300<<10)] // its own bytes: a reused buffer not yet written shows
		want.Write(p)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	w.Close()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		i := 0
		for i < min(len(b), want.Len()) && b[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("%d bytes arrived, %d written; they differ from byte %d", len(b), want.Len(), i)
	}
}
