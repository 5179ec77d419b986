package console

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"

	"tpurun/internal/failure"
)

// consoleQueue is how many bytes a console holds for a slow reader before the workers' output waits (backpressure,
// as a pipe gives); tpurun's own log records may queue logSlack more and are then counted and dropped, so that a
// log call never waits for a reader.
const (
	consoleQueue = 1 << 20
	logSlack     = 1 << 20
)

// Console is one output file of the launcher (its stdout or stderr) with a single writer goroutine: everything
// written to the file goes through it, in whole chunks (whole lines), so lines of different workers, of stdout
// and stderr when they are one file (2>&1), and of tpurun's own log never splice. Write queues and waits while
// the queue is full (a stalled reader slows the workers, never drops their output); LogWriter never waits. The
// first write error is kept (an *failure.OutputError), reported to the run (which stops) and returned by Flush; output
// after it is discarded so that no worker blocks on a file nobody can write.
type Console struct {
	name string
	w    io.Writer

	mu        sync.Mutex
	more      *sync.Cond // the writer: something queued; writers: room in the queue, or the queue is empty
	q         [][]byte
	queued    int
	spare     [][]byte // buffers the writer is done with, for push to copy into (at most consoleQueue bytes)
	spareCap  int
	writing   bool
	since     time.Time // when the write in progress began
	hurriedAt time.Time // when Hurry was called (zero: not hurried)
	err       error
	abandoned bool
	lost      int            // bytes queued (or being written) when the console was abandoned
	stopSig   syscall.Signal // the stop signal tpurun received, if any: what the output was lost to (Stopped)
	closed    bool
	dropped   int
	onErr     []chan<- error
	owner     *Forwarder // the forwarder that holds the console for a line it has not ended yet: other writes wait
	held      [][]byte   // tpurun's log records written while the console is held: queued when it is let go
	heldBytes int
}

// NewConsole starts the writer of w, named name ("stdout", "stderr") in messages.
func NewConsole(name string, w io.Writer) *Console {
	c := &Console{name: name, w: w}
	c.more = sync.NewCond(&c.mu)
	go c.run()
	return c
}

// Terminal reports whether the console writes to a terminal (where a person watches: partial segments are shown,
// see PartialAfter).
func (c *Console) Terminal() bool { return c.WindowSize() != nil }

// Of returns the consoles of a launcher's stdout and stderr writers: a writer that is a *Console is used as it is;
// any other gets a console, started here and returned in made too (the caller flushes and closes those). stderr
// shares stdout's console, named "stdout and stderr" when made here, when both are one file (the same device and
// inode: --json, 2>&1), so that the lines of the two streams stay whole.
func Of(stdout, stderr io.Writer) (out, errc *Console, made []*Console) {
	open := func(name string, w io.Writer) *Console {
		if c, ok := w.(*Console); ok {
			return c
		}
		c := NewConsole(name, w)
		made = append(made, c)
		return c
	}
	out = open("stdout", stdout)
	errc = out
	switch {
	case !sameFile(stdout, stderr):
		errc = open("stderr", stderr)
	case len(made) > 0:
		out.name = "stdout and stderr"
	}
	return out, errc, made
}

// sameFile reports whether a and b are one writer (compared without panicking on uncomparable types) or one open
// file.
func sameFile(a, b io.Writer) bool {
	if a != nil && b != nil && reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.TypeOf(a).Comparable() && a == b {
		return true
	}
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	var sa, sb syscall.Stat_t
	if syscall.Fstat(int(fa.Fd()), &sa) != nil || syscall.Fstat(int(fb.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// Write queues a copy of p, waiting while the queue is full or a forwarder holds the console (writeFor). After a
// write error, or once abandoned, it discards p.
func (c *Console) Write(p []byte) (int, error) {
	c.writeFor(nil, p, false)
	return len(p), nil
}

// writeFor queues a copy of p written by the forwarder by (nil: any other writer), waiting while the queue is full
// or another forwarder holds the console. With hold, by holds the console from now on (p leaves its line open: the
// pieces of a long line, see Forwarder); without, a hold by by ends. After a write error, or once abandoned, it
// discards p and holds nothing.
func (c *Console) writeFor(by *Forwarder, p []byte, hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for (c.queued >= consoleQueue || c.owner != nil && c.owner != by) && c.err == nil && !c.abandoned {
		c.more.Wait()
	}
	if c.err != nil || c.abandoned {
		c.owner = nil
		return
	}
	c.push(p)
	switch {
	case hold && by != nil:
		c.owner = by
	case c.owner == by:
		c.letGo()
	}
}

// release ends the hold of by, if it holds the console.
func (c *Console) release(by *Forwarder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner == by {
		c.letGo()
	}
}

// letGo (c.mu held) ends the hold: tpurun's log records written meanwhile are queued, and the waiting writes go on.
func (c *Console) letGo() {
	c.owner = nil
	for _, r := range c.held {
		if c.err == nil && !c.abandoned {
			c.push(r)
		}
	}
	c.held, c.heldBytes = nil, 0
	c.more.Broadcast()
}

// push queues a copy of p, in a spare buffer when the last one is large enough: output at hundreds of MB/s (a
// worker's, a results document of large values) then reuses the queue's memory instead of fresh pages, whose
// first touch costs more than the copy (docs/BENCHMARKS.md, "Results at pipe speed").
func (c *Console) push(p []byte) {
	var b []byte
	if n := len(c.spare); n > 0 && cap(c.spare[n-1]) >= len(p) {
		b = c.spare[n-1][:0]
		c.spare[n-1] = nil
		c.spare = c.spare[:n-1]
		c.spareCap -= cap(b)
	}
	c.q = append(c.q, append(b, p...))
	c.queued += len(p)
	c.more.Broadcast()
}

// Notify has err sent (without waiting) to ch on the first write error.
func (c *Console) Notify(ch chan<- error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		select {
		case ch <- c.err:
		default:
		}
		return
	}
	c.onErr = append(c.onErr, ch)
}

func (c *Console) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.q) == 0 {
			if c.closed {
				return
			}
			c.more.Wait()
		}
		batch := c.q
		c.q, c.writing, c.since = nil, true, time.Now()
		c.mu.Unlock()
		var err error
		n := 0
		for _, b := range batch {
			if err == nil {
				_, err = c.w.Write(b)
			}
			n += len(b)
		}
		c.mu.Lock()
		for _, b := range batch {
			if c.spareCap+cap(b) <= consoleQueue {
				c.spare = append(c.spare, b)
				c.spareCap += cap(b)
			}
		}
		c.writing = false
		c.queued = max(c.queued-n, 0) // Abandon may have emptied the queue meanwhile
		if err != nil && c.err == nil {
			c.err = &failure.OutputError{Stream: c.name, Err: err, Stopped: true}
			for _, ch := range c.onErr {
				select {
				case ch <- c.err:
				default:
				}
			}
		}
		c.more.Broadcast()
	}
}

// Flush waits until everything queued has been written (or abandoned, see Hurry) and returns the first write
// error; when output was discarded after a stop signal (Stopped), a *failure.SignalError. Records the logger
// dropped while the file was not read are reported last.
func (c *Console) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner != nil { // the last words: a line left open is not waited for
		c.letGo()
	}
	if c.dropped > 0 && c.err == nil && !c.abandoned {
		c.push(fmt.Appendf(nil, "tpurun: %d log records were dropped while %s was not read\n", c.dropped, c.name))
		c.dropped = 0
	}
	for (len(c.q) > 0 || c.writing) && c.err == nil && !c.abandoned {
		c.more.Wait()
	}
	if c.err != nil {
		return c.err
	}
	if c.lost > 0 && c.stopSig != 0 { // counts what was queued and the batch being written: part of it may have gone out
		return &failure.SignalError{Signal: c.stopSig, During: fmt.Sprintf("a write to %s nobody read (at most %d bytes dropped)", c.name, c.lost)}
	}
	return nil
}

// Flush flushes each console in turn (see Console.Flush) and returns the first error.
func Flush(consoles ...*Console) error {
	var first error
	for _, c := range consoles {
		if err := c.Flush(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close ends the writer goroutine once the queue is empty; it does not wait.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.more.Broadcast()
}

// Err is the first write error, nil if none.
func (c *Console) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
