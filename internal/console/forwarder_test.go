package console

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"tpurun/internal/testutil"
)

// jsonLine is one line of JSON of n bytes, newline included.
func jsonLine(n int) []byte {
	return []byte(`{"x": "` + strings.Repeat("a", n-10) + "\"}\n")
}

// feedIn feeds b to f in reads of at most readSize, as a pipe gives them.
func feedIn(f *Forwarder, b []byte) {
	for len(b) > 0 {
		n := min(readSize, len(b))
		f.feed(b[:n])
		b = b[n:]
	}
}

// recorder is a console that keeps each write apart.
type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

// TestForwarderRawLongLineIsTheBytes: without a prefix, a line of 3,000,012 bytes (three times what a forwarder
// holds back) reaches the console as written, with no newline added (one was added per 1 MiB), and the lines that
// another worker writes meanwhile to the same console never get into it: the long line holds the console until
// it ends. Both forwarders run at once, through one Console, as two workers' forwarders do.
func TestForwarderRawLongLineIsTheBytes(t *testing.T) {
	var out syncBuffer
	out.wrote = make(chan struct{}, 1)
	c := NewConsole("stdout", &out)
	defer c.Close()
	long := jsonLine(3_000_012)
	// A long wait before a pause lets the console go: the test is about the pieces, not about a loaded machine.
	a := &Forwarder{Console: c, ShowPartial: testutil.Deadline()}
	b := &Forwarder{Console: c, ShowPartial: testutil.Deadline()}
	bDone := make(chan struct{})
	feedIn(a, long[:maxLine]) // what a forwarder holds back: from here on the line goes on as it comes
	go func() {
		defer close(bDone)
		for i := range 2000 {
			b.feed(fmt.Appendf(nil, "short %d\n", i))
		}
		b.flush()
	}()
	blockedOrDone(t, c, bDone)
	feedIn(a, long[maxLine:])
	a.flush()
	<-bDone
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := []byte(out.String())
	i := bytes.Index(got, long)
	if i < 0 {
		t.Fatalf("the long line is not on the console as written (%d bytes in all, %d newlines; want %d bytes and 2001)",
			len(got), bytes.Count(got, []byte("\n")), len(long)+shortBytes(2000))
	}
	rest := append(append([]byte(nil), got[:i]...), got[i+len(long):]...)
	for i := range 2000 {
		line := fmt.Appendf(nil, "short %d\n", i)
		if !bytes.Contains(rest, line) {
			t.Fatalf("the other worker's line %q is missing or cut", line)
		}
	}
	if len(rest) != shortBytes(2000) {
		t.Fatalf("%d bytes besides the long line, want the other worker's %d", len(rest), shortBytes(2000))
	}
}

// blockedOrDone waits until done is closed or, with everything queued on c written, a writer waits in c (for a
// hold: the queue has room).
func blockedOrDone(t *testing.T, c *Console, done <-chan struct{}) {
	t.Helper()
	testutil.Eventually(t, "the other writer done, or waiting for the console", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		c.mu.Lock()
		empty := len(c.q) == 0 && !c.writing
		c.mu.Unlock()
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if empty && bytes.Contains(g, []byte("[sync.Cond.Wait")) && bytes.Contains(g, []byte("(*Console).writeFor")) {
				return true
			}
		}
		return false
	})
}

// shortBytes is how many bytes the lines "short 0\n" ... "short n-1\n" have.
func shortBytes(n int) int {
	total := 0
	for i := range n {
		total += len(fmt.Sprintf("short %d\n", i))
	}
	return total
}

// TestForwarderTerminalWritesEachReadWhole: to a terminal, what one read brings (a frame of tqdm's bars at
// position=rank: newlines, a carriage return, the bar, cursor-up escapes, and no newline at the end) is one write
// of the console, at once, with a prefix too (each segment after it); the next frame goes on the same way.
func TestForwarderTerminalWritesEachReadWhole(t *testing.T) {
	frames := []string{"\n\r 10%|#   | 1/10\x1b[A", "\n\r 20%|##  | 2/10\x1b[A", "\n\r100%|####| 10/10\n"}
	for _, prefix := range []string{"", "[1] "} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			var rec recorder
			f := &Forwarder{Prefix: []byte(prefix), Console: &rec, Terminal: true}
			for i, fr := range frames {
				f.feed([]byte(fr))
				rec.mu.Lock()
				n, last := len(rec.writes), ""
				if n > 0 {
					last = rec.writes[n-1]
				}
				rec.mu.Unlock()
				want := fr
				if prefix != "" {
					want = strings.NewReplacer("\n", "\n"+prefix, "\r", "\r"+prefix).Replace(fr)
					if i == 0 {
						want = prefix + want
					}
					want = strings.TrimSuffix(want, prefix)
				}
				if n != i+1 || last != want {
					t.Fatalf("after frame %d the console got %d writes, the last %q; want %d, the last %q", i, n, last, i+1, want)
				}
			}
			f.flush()
		})
	}
}

// TestForwarderTerminalLongLineHolds: to a terminal, where each read goes out as it comes, a line that outgrows a
// frame (read in a pseudo-terminal's 4 KiB pieces) holds the console until it ends: another worker's lines written
// meanwhile come before or after it, never inside.
func TestForwarderTerminalLongLineHolds(t *testing.T) {
	var out syncBuffer
	out.wrote = make(chan struct{}, 1)
	c := NewConsole("stdout", &out)
	defer c.Close()
	long := jsonLine(200 << 10)
	a := &Forwarder{Console: c, Terminal: true, ShowPartial: testutil.Deadline()}
	b := &Forwarder{Console: c, Terminal: true}
	bDone := make(chan struct{})
	a.feed(long[:4095])
	go func() {
		defer close(bDone)
		for i := range 200 {
			b.feed(fmt.Appendf(nil, "short %d\n", i))
		}
		b.flush()
	}()
	blockedOrDone(t, c, bDone)
	for p := long[4095:]; len(p) > 0; {
		n := min(4095, len(p))
		a.feed(p[:n])
		p = p[n:]
	}
	a.flush()
	<-bDone
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, string(long)) {
		t.Fatalf("another worker's line got into the long line: %d bytes, %d newlines", len(got), strings.Count(got, "\n"))
	}
	if len(got) != len(long)+shortBytes(200) {
		t.Fatalf("%d bytes on the console, want %d", len(got), len(long)+shortBytes(200))
	}
}

// TestForwarderHoldIsLetGoWhenThePieceStops: a long raw line that stops coming mid-line (the worker works, or
// waits) lets the console go after ShowPartial: another worker's line is written, after the piece shown; tpurun's
// own log record waits for the hold too, and goes out with it.
func TestForwarderHoldIsLetGoWhenThePieceStops(t *testing.T) {
	var out syncBuffer
	out.wrote = make(chan struct{}, 1)
	c := NewConsole("stdout", &out)
	defer c.Close()
	a := &Forwarder{Console: c, ShowPartial: 50 * time.Millisecond}
	b := &Forwarder{Console: c}
	long := jsonLine(maxLine + 10)
	feedIn(a, long[:maxLine]) // held from here
	_, _ = c.LogWriter().Write([]byte("tpurun log\n"))
	done := make(chan struct{})
	go func() {
		b.feed([]byte("other\n"))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(testutil.Deadline()):
		t.Fatal("a paused long line kept the console: the other worker's line never went out")
	}
	a.feed(long[maxLine:])
	a.flush()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	want := string(long[:maxLine]) + "tpurun log\nother\n" + string(long[maxLine:])
	if got := out.String(); got != want {
		t.Fatalf("console has %d bytes (%q...), want the piece, the log record, the other line, the rest", len(got), got[maxLine-5:min(len(got), maxLine+30)])
	}
}

// TestForwarderTerminalLineInTwoWrites: at a terminal Python's print writes its text, then the newline, in two
// writes: the open line holds the console, so another worker's line written between them waits for the newline
// instead of splitting the line; a progress bar's redraw (what follows a carriage return) holds nothing.
func TestForwarderTerminalLineInTwoWrites(t *testing.T) {
	var out syncBuffer
	out.wrote = make(chan struct{}, 1)
	c := NewConsole("stdout", &out)
	defer c.Close()
	a := &Forwarder{Console: c, Terminal: true, ShowPartial: testutil.Deadline()}
	b := &Forwarder{Console: c, Terminal: true}
	a.feed([]byte("tty 111 size 33 91/33 91"))
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b.feed([]byte("other\n"))
	}()
	blockedOrDone(t, c, bDone)
	a.feed([]byte("\n"))
	<-bDone
	a.feed([]byte("\r 10%|#"))
	c.mu.Lock()
	owner := c.owner
	c.mu.Unlock()
	if owner != nil {
		t.Fatal("a progress bar's redraw holds the console")
	}
	b.feed([]byte("more\n"))
	a.flush()
	b.flush()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "tty 111 size 33 91/33 91\nother\n\r 10%|#more\n"; got != want {
		t.Fatalf("console %q, want %q", got, want)
	}
}
