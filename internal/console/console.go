// Package console owns what the launcher writes for people and reads from its workers: a Console is one output
// file (stdout or stderr) with one writer goroutine, so lines of different workers, of both streams and of tpurun's
// own log never splice and a slow reader slows the workers instead of losing their lines; a Forwarder copies one
// stream of one worker to it, the worker's bytes, or whole lines with the worker's prefix (Prefix), raw bytes to
// its log file and the last ones into a Tail; the workers' pipes are made (Pipe) and read to their end, bounded once
// the workers are gone (Drain). Std, StdSpec and StdinMode say which streams go where and which workers read stdin.
// This file is the Console, the streams and tpurun's own log on it; the others the Forwarder, the pipes and their
// drain, and a worker's own terminal.
package console

import (
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
	"tpurun/internal/setting"
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
	case c.queued+c.heldBytes >= consoleQueue+logSlack:
		c.dropped++
	case c.owner != nil: // a worker's line is open on the console: the record follows it
		c.held = append(c.held, append([]byte(nil), p...))
		c.heldBytes += len(p)
	default:
		c.push(p)
	}
	return len(p), nil
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
	c.lost += c.queued + c.heldBytes
	c.q, c.queued = nil, 0
	c.owner, c.held, c.heldBytes = nil, nil, 0
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

// Std selects standard streams, with torchrun's numbers: 0 none, 1 stdout, 2 stderr, 3 both.
type Std int

// The values of Std.
const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdAll  Std = 3
)

// StdSpec is a --redirects or --tee value: one Std for every local rank, or a per-local-rank map
// ("0:1,1:2"; ranks not listed get StdNone).
type StdSpec struct {
	All     Std
	PerRank map[int]Std
}

// For returns the streams selected for localRank.
func (s StdSpec) For(localRank int) Std {
	if s.PerRank != nil {
		return s.PerRank[localRank]
	}
	return s.All
}

// Any reports whether some rank selects some stream.
func (s StdSpec) Any() bool {
	if s.PerRank != nil {
		for _, v := range s.PerRank {
			if v != StdNone {
				return true
			}
		}
		return false
	}
	return s.All != StdNone
}

// StdinMode says which workers read tpurun's stdin (Spec.Stdin); the others read /dev/null.
type StdinMode string

// The stdin modes (--stdin).
const (
	StdinAll   StdinMode = "all"  // every worker, as torchrun's workers inherit its stdin (the default)
	StdinFirst StdinMode = "0"    // local rank 0 only
	StdinNone  StdinMode = "none" // no worker: /dev/null for all
)

// Level is tpurun's own log level: debug when verbose, warnings and errors when quiet (tpurun --quiet), else info.
func Level(verbose, quiet bool) zapcore.Level {
	switch {
	case verbose:
		return zapcore.DebugLevel
	case quiet:
		return zapcore.WarnLevel
	}
	return zapcore.InfoLevel
}

// NewLogger is tpurun's own logger on w: "console" (human) or "json" (machines), at level.
func NewLogger(format string, level zapcore.Level, w io.Writer) (*zap.Logger, error) {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		ec.EncodeCaller = nil
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, &failure.ConfigError{Field: setting.LogFormat, Value: format, Hint: "use console or json"}
	}
	return zap.New(uniqueKeys{Core: zapcore.NewCore(enc, zapcore.AddSync(w), level)}).Named("tpurun"), nil
}

// uniqueKeys is a core whose records have each key once: a field whose key the logger's context (With) or an
// earlier field of the record already has is dropped, the first one kept. The layers log with the loggers they are
// given and add what they know (the rendezvous's run id to a job's logger that has it already); a JSON record with
// a key twice is one that decoders read differently (the last wins in most, an error in some). Fields after a
// namespace are the namespace's own.
type uniqueKeys struct {
	zapcore.Core
	keys map[string]bool // the context's keys
}

func (c uniqueKeys) With(fields []zapcore.Field) zapcore.Core {
	kept, keys := c.unique(fields)
	return uniqueKeys{Core: c.Core.With(kept), keys: keys}
}

func (c uniqueKeys) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c uniqueKeys) Write(e zapcore.Entry, fields []zapcore.Field) error {
	kept, _ := c.unique(fields)
	return c.Core.Write(e, kept)
}

// unique is fields without those whose key came before (in the context or in fields), and the keys so far.
func (c uniqueKeys) unique(fields []zapcore.Field) ([]zapcore.Field, map[string]bool) {
	keys := maps.Clone(c.keys)
	if keys == nil {
		keys = map[string]bool{}
	}
	kept := make([]zapcore.Field, 0, len(fields))
	for i, f := range fields {
		if f.Type == zapcore.NamespaceType { // what follows is nested under f.Key
			keys[f.Key] = true
			return append(kept, fields[i:]...), keys
		}
		if keys[f.Key] && f.Type != zapcore.SkipType {
			continue
		}
		keys[f.Key] = true
		kept = append(kept, f)
	}
	return kept, keys
}
