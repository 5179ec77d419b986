package console

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"
)

const (
	// readSize matches the default pipe capacity: one read takes everything a burst of lines left in the pipe.
	readSize = 64 << 10
	// maxLine bounds how much of one unterminated line is held back, so that a worker that never prints a newline
	// cannot grow memory: a longer line goes on as it comes (see Forwarder).
	maxLine = 1 << 20
)

// PartialAfter is how long a partial segment (no newline or carriage return yet: a prompt, "Downloading... ", a
// progress bar's text before its next \r) waits for more before a forwarder to a pipe or a file shows it
// (Forwarder.ShowPartial), and how long a long line that holds the console there may pause before the console is
// let go. A second: a prompt behind `| tee` shows while it waits, and a long line that reaches its pipe in pieces
// (microseconds apart, milliseconds under load) stays whole.
const PartialAfter = time.Second

// TerminalPause is how long a line a forwarder to a terminal holds the console for may pause before the console
// is let go: a program at a terminal writes a line in pieces microseconds apart (Python's print writes the text,
// then the newline; a long line comes in the pseudo-terminal's 4 KiB reads), while a prompt waits for a person and
// a row of dots comes one by one: the other workers' output waits at most this long for them.
const TerminalPause = 50 * time.Millisecond

// Forwarder copies one stream of one worker: raw bytes to File, the last ones to Tail, and to Console each segment
// (up to a newline or a carriage return, so a progress bar's redraws show as they come) after Prefix, if any;
// without a prefix the console gets the worker's bytes, none added or removed. One console write per read: the
// segments of one read are never split by another worker's.
//
// To a terminal (Terminal) each read goes out whole, its partial segment with it: what the worker wrote in one
// write (a progress bar's frame) arrives in one piece, and a read that leaves a line open (but a redraw, what
// follows a carriage return) holds the console (a *Console) until the line ends, so that a line written in pieces
// stays whole; a pause of TerminalPause in it lets the other writers go on. To a pipe or a file a partial segment
// waits for its end, so that lines of different workers never splice, or ShowPartial without more bytes; a line
// longer than maxLine goes on as it comes, holding the console likewise (a pause of PartialAfter lets the others
// go on), or, prefixed, is cut in pieces of maxLine, each with its prefix and a newline.
type Forwarder struct {
	Prefix  []byte
	Console io.Writer // nil: not shown on the console
	File    io.Writer // nil: no log file
	Tail    *Tail     // nil: not kept

	// Terminal says that the console is a terminal: each read is written whole, as the worker wrote it.
	Terminal bool
	// ShowPartial is how long a partial segment into a pipe or a file waits for more before it is shown (the
	// rest of its line continues it, without a prefix); 0: it waits for its end.
	ShowPartial time.Duration

	mu      sync.Mutex // the reader's feed against the idle timer
	pending []byte     // the partial segment not yet shown
	midLine bool       // the console shows a partial segment of this stream: what follows continues it
	held    bool       // this forwarder holds its console for its open line
	open    int        // how much of the line the console shows is open (no newline nor \r yet), when written through
	redraw  bool       // to a terminal: the open line follows a carriage return (a progress bar's text)
	fed     time.Time  // when the last read was fed, while the idle timer may run
	idle    *time.Timer
	armed   bool
	out     []byte
}

// readBufs are the read buffers of the forwarders. A forwarder of a worker's pipe (drainReader) holds one only
// from the moment the pipe has data until it has fed it on: hundreds of idle workers hold none.
var readBufs = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// Run reads r until EOF or a read error (a passed drain deadline ends it with os.ErrDeadlineExceeded) and
// flushes the last partial segment.
func (f *Forwarder) Run(r io.Reader) error {
	pr, pooled := r.(drainReader) // takes a buffer only once data has arrived
	for {
		var buf *[]byte
		var n int
		var err error
		if pooled {
			buf, n, err = pr.readPooled()
		} else {
			buf = readBufs.Get().(*[]byte)
			n, err = r.Read(*buf)
		}
		if n > 0 {
			f.feed((*buf)[:n])
		}
		if buf != nil {
			readBufs.Put(buf)
		}
		if err != nil {
			f.flush()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (f *Forwarder) feed(chunk []byte) {
	if f.File != nil {
		_, _ = f.File.Write(chunk)
	}
	if f.Tail != nil {
		f.Tail.add(chunk)
	}
	if f.Console == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Terminal || f.held {
		f.through(chunk)
	} else {
		f.lines(chunk)
	}
	if f.held || len(f.pending) > 0 && f.ShowPartial > 0 {
		f.fed = time.Now()
		f.armIdle()
	}
	if cap(f.out) > 4*readSize {
		f.out = nil // do not keep a huge buffer after one long line
	}
}

// lines (f.mu held) writes the complete segments of chunk, after what was pending, and keeps its partial segment
// pending; a pending line that reaches maxLine goes on (overflow).
func (f *Forwarder) lines(chunk []byte) {
	last := lastEnd(chunk)
	if last < 0 {
		f.pending = append(f.pending, chunk...)
		if len(f.pending) >= maxLine {
			f.overflow()
		}
		return
	}
	f.out = f.out[:0]
	eachSegment(chunk[:last+1], func(seg []byte) {
		if !f.midLine {
			f.out = append(f.out, f.Prefix...)
		}
		f.out = append(append(f.out, f.pending...), seg...)
		f.pending, f.midLine = f.pending[:0], false
	})
	f.write(f.out, false)
	f.pending = append(f.pending, chunk[last+1:]...)
}

// overflow (f.mu held) lets a pending line of maxLine go on: a prefixed one in pieces of maxLine, each a line; a
// raw one as it is, the console held until the line ends (through).
func (f *Forwarder) overflow() {
	if len(f.Prefix) > 0 {
		for len(f.pending) >= maxLine {
			f.emit(f.pending[:maxLine], true)
			f.pending = append(f.pending[:0], f.pending[maxLine:]...)
		}
		return
	}
	p := f.pending
	f.pending, f.held, f.open = nil, true, 0 // a new buffer for the next line: this one was a long line's
	f.through(p)
}

// through (f.mu held) writes chunk as it comes: all of it to a terminal; into a pipe or a file (a long line goes
// on) up to the end of its line, the rest pending (lines). The console is held while the line stays open, but for
// a terminal's redraw.
func (f *Forwarder) through(chunk []byte) {
	last := lastEnd(chunk)
	if !f.Terminal && last >= 0 {
		f.write(chunk[:last+1], false)
		f.open = 0
		f.lines(chunk[last+1:])
		return
	}
	if last < 0 {
		f.open += len(chunk)
	} else {
		f.open, f.redraw = len(chunk)-1-last, chunk[last] == '\r'
	}
	hold := f.open > 0 && !(f.Terminal && f.redraw)
	if len(f.Prefix) == 0 {
		f.write(chunk, hold)
		return
	}
	f.out = f.out[:0]
	eachSegment(chunk, func(seg []byte) {
		if !f.midLine {
			f.out = append(f.out, f.Prefix...)
		}
		f.out = append(f.out, seg...)
		f.midLine = seg[len(seg)-1] != '\n' && seg[len(seg)-1] != '\r'
	})
	f.write(f.out, hold)
}

// write (f.mu held) writes p to the console; with hold, f holds it (a *Console) for its open line, else a hold ends.
func (f *Forwarder) write(p []byte, hold bool) {
	if c, ok := f.Console.(*Console); ok {
		c.writeFor(f, p, hold)
	} else {
		_, _ = f.Console.Write(p)
	}
	f.held = hold
}

// letGo (f.mu held) ends f's hold of its console: the line stays open, the other writers go on.
func (f *Forwarder) letGo() {
	if c, ok := f.Console.(*Console); ok {
		c.release(f)
	}
	f.held = false
}

// lastEnd is where the last newline or carriage return of b is, -1 if none.
func lastEnd(b []byte) int {
	return max(bytes.LastIndexByte(b, '\n'), bytes.LastIndexByte(b, '\r'))
}

// eachSegment calls fn with each segment of b, which ends in a newline or a carriage return: every segment ends
// in one of them except a last one that has neither. Two byte scans, not a scan per byte.
func eachSegment(b []byte, fn func(seg []byte)) {
	nl, cr := bytes.IndexByte(b, '\n'), bytes.IndexByte(b, '\r')
	for len(b) > 0 {
		i := nl
		if i < 0 || cr >= 0 && cr < i {
			i = cr
		}
		if i < 0 {
			fn(b)
			return
		}
		fn(b[:i+1])
		b = b[i+1:]
		nl, cr = nextAt(b, '\n', nl, i), nextAt(b, '\r', cr, i)
	}
}

// nextAt is where c is in b, the rest after the segment that ended at i: at was where it was before (-1: absent for
// good); only the terminator just consumed is looked for again.
func nextAt(b []byte, c byte, at, i int) int {
	switch {
	case at < 0:
		return -1
	case at == i:
		return bytes.IndexByte(b, c)
	default:
		return at - (i + 1)
	}
}

// armIdle (f.mu held) has onIdle run once the stream has been idle long enough (pause). A timer that runs already
// is left as it is: onIdle counts from the last feed.
func (f *Forwarder) armIdle() {
	if f.armed {
		return
	}
	f.armed = true
	d := f.pause()
	if f.idle == nil {
		f.idle = time.AfterFunc(d, f.onIdle)
		return
	}
	f.idle.Reset(d)
}

// pause is how long the stream may be idle before onIdle acts: ShowPartial when set, else TerminalPause to a
// terminal and PartialAfter to a pipe or a file.
func (f *Forwarder) pause() time.Duration {
	switch {
	case f.ShowPartial > 0:
		return f.ShowPartial
	case f.Terminal:
		return TerminalPause
	}
	return PartialAfter
}

// onIdle shows the pending partial segment as it is (the console's cursor stays after it, and the rest of the
// segment continues it) and lets the console go, once the stream has been idle long enough since the last feed (a
// feed that waited for the console meanwhile is not idleness of the worker's).
func (f *Forwarder) onIdle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	show := len(f.pending) > 0 && f.ShowPartial > 0
	if !show && !f.held || f.Console == nil {
		return
	}
	if wait := f.pause() - time.Since(f.fed); wait > 0 {
		f.armed = true
		f.idle.Reset(wait)
		return
	}
	if f.held {
		f.letGo()
	}
	if show {
		f.emit(f.pending, false)
		f.pending = f.pending[:0]
	}
}

// emit (f.mu held) writes one prefixed piece of a line; newline adds the terminating newline the line lacks, else
// the line stays open on the console (what follows continues it).
func (f *Forwarder) emit(line []byte, newline bool) {
	f.out = f.out[:0]
	if !f.midLine {
		f.out = append(f.out, f.Prefix...)
	}
	f.out = append(f.out, line...)
	if newline {
		f.out = append(f.out, '\n')
	}
	f.midLine = !newline
	f.write(f.out, false)
}

// flush shows what is left at the stream's end and lets the console go. A prefixed stream ends its last line (the
// next one shown is another worker's); raw output stays as the worker wrote it.
func (f *Forwarder) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle != nil {
		f.idle.Stop()
	}
	prefixed := len(f.Prefix) > 0
	switch {
	case f.Console == nil:
	case len(f.pending) > 0 || f.midLine && prefixed:
		f.emit(f.pending, prefixed)
	case f.held:
		f.letGo()
	}
	f.pending, f.out, f.midLine, f.held, f.open, f.redraw, f.armed = nil, nil, false, false, 0, false, false
}
