package console

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
func (c *Console) Terminal() bool {
	f, ok := c.w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// NewConsoles returns the consoles of a launcher's stdout and stderr: one console when both are the same open
// file (the same device and inode, as after 2>&1), so their lines stay whole in it.
func NewConsoles(stdout, stderr io.Writer) (out, errc *Console) {
	out = NewConsole("stdout", stdout)
	if sameFile(stdout, stderr) {
		out.name = "stdout and stderr"
		return out, out
	}
	return out, NewConsole("stderr", stderr)
}

// Of returns the consoles of a launcher's stdout and stderr writers: a writer that is a *Console is used as it is;
// any other gets a console, started here and returned in made too (the caller flushes and closes those). stderr
// shares stdout's console when both are one file (--json, 2>&1), so that the lines of the two streams stay whole.
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
	if !sameFile(stdout, stderr) {
		errc = open("stderr", stderr)
	}
	return out, errc, made
}

func sameFile(a, b io.Writer) bool {
	if sameWriter(a, b) {
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

// Write queues a copy of p, waiting while the queue is full. After a write error, or once abandoned, it discards p.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.queued >= consoleQueue && c.err == nil && !c.abandoned {
		c.more.Wait()
	}
	if c.err != nil || c.abandoned {
		return len(p), nil
	}
	c.push(p)
	return len(p), nil
}

// LogWriter is a writer for tpurun's own logger on c: it never waits; past the queue's slack a record is counted
// and dropped (Flush reports how many).
func (c *Console) LogWriter() io.Writer { return logWriterOf{c} }

type logWriterOf struct{ c *Console }

func (l logWriterOf) Write(p []byte) (int, error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil || c.abandoned:
	case c.queued >= consoleQueue+logSlack:
		c.dropped++
	default:
		c.push(p)
	}
	return len(p), nil
}

func (c *Console) push(p []byte) {
	c.q = append(c.q, append([]byte(nil), p...))
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

// Stopped records that tpurun received the stop signal sig (the first one counts): output that the console then
// abandons (at once, or hurried) was lost to it, and Flush says so with a *failure.SignalError.
func (c *Console) Stopped(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopSig == 0 {
		c.stopSig = sig
	}
}

// AfterStop is how long a write may wait for its reader once a stop signal came when nothing was left to stop
// gently (see Stop).
const AfterStop = time.Second

// Stop is what the stop signal sig does to the consoles once no worker runs: it is recorded (Stopped) and each write
// from now on waits at most AfterStop for its reader (Hurry), so that the end of the run is bounded whichever files
// are stalled, and a file whose reader reads still gets its output.
func Stop(sig syscall.Signal, consoles ...*Console) {
	for _, c := range consoles {
		c.Stopped(sig)
		c.Hurry(AfterStop)
	}
}

// Abandon stops waiting for the reader: what is queued and everything written from now on is discarded.
func (c *Console) Abandon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = true
	c.lost += c.queued
	c.q, c.queued = nil, 0
	c.more.Broadcast()
}

// Hurry gives the reader at most d more per write, counted from now for a write already waiting: once one write
// has waited that long, the console is abandoned (see Abandon). A second stop signal hurries the consoles: the run
// ends soon even if nobody reads.
func (c *Console) Hurry(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hurriedAt.IsZero() {
		return
	}
	c.hurriedAt = time.Now()
	go func() {
		t := time.NewTicker(d / 10)
		defer t.Stop()
		for now := range t.C {
			c.mu.Lock()
			done := c.abandoned || c.err != nil || (c.closed && len(c.q) == 0 && !c.writing)
			stalled := c.overdue(now, d)
			c.mu.Unlock()
			if stalled {
				c.Abandon()
				return
			}
			if done {
				return
			}
		}
	}()
}

// overdue reports whether the write in progress has waited d for its reader at now, counting from when it began or
// from when the console was hurried, whichever came later.
func (c *Console) overdue(now time.Time, d time.Duration) bool {
	if !c.writing {
		return false
	}
	from := c.since
	if c.hurriedAt.After(from) {
		from = c.hurriedAt
	}
	return now.Sub(from) >= d
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

// sameWriter reports whether a and b are one writer (comparing them without panicking on uncomparable types).
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
