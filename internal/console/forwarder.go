package console

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// readSize matches the default pipe capacity: one read takes everything a burst of lines left in the pipe.
	readSize = 64 << 10
	// maxLine bounds how much of one unterminated line is held back; a longer line is emitted in pieces of this
	// size, each with its prefix and a newline, so a worker that never prints a newline cannot grow memory.
	maxLine = 1 << 20
	// tailSize is how much of a worker's stderr is kept for the root-cause report.
	tailSize = 8 << 10
)

// PartialAfter is how long a partial segment (no newline or carriage return yet: a prompt, "loading...", the text of
// a progress bar that the next \r redraws) waits for more before a forwarder to a terminal shows it as it is
// (Forwarder.ShowPartial). Only to a terminal, where a person watches: under load a worker's long line can reach its
// pipe in pieces more than this apart, and a partial shown would let another worker's line into it; a pipe or a file
// keeps every line whole.
const PartialAfter = 100 * time.Millisecond

// DefaultPrefix is the line prefix of a worker's output when a prefix is asked for without a template: its rank.
const DefaultPrefix = "[{rank}] "

// TeePrefix is torchrun's prefix of the lines it tees to its console: the role and the local rank
// ("[default0]:"), as torch.distributed.elastic writes it.
const TeePrefix = "[{role}{local_rank}]:"

// Forwarder copies one stream of one worker: to the console in whole segments (a segment ends at a newline or a
// carriage return, so a progress bar's redraws show as they come), each after Prefix when there is one, raw bytes
// to the log file, and the last bytes into a tail for the report. With ShowPartial, a partial segment is shown
// after that long without more bytes, and what follows continues it (no prefix). One console write per read: the
// segments of one read are never split by another worker's.
type Forwarder struct {
	Prefix  []byte
	Console io.Writer // nil: not shown on the console
	File    io.Writer // nil: no log file
	Tail    *Tail     // nil: not kept

	mu      sync.Mutex // pending, midLine, out: the reader's feed against the idle flush
	pending []byte     // the partial segment not yet shown
	midLine bool       // the console shows a partial segment of this stream: what follows continues it
	idle    *time.Timer
	out     []byte

	ShowPartial time.Duration // 0: a partial segment waits for its end (PartialAfter for a terminal)
}

// readBufs are the read buffers of the forwarders. A forwarder of a worker's pipe (drainReader) holds one only
// from the moment the pipe has data until it has fed it on: hundreds of idle workers hold none.
var readBufs = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// pooledReader reads into a buffer of readBufs that it takes once data has arrived; the caller puts it back.
type pooledReader interface {
	readPooled() (buf *[]byte, n int, err error)
}

// Run reads r until EOF or a read error (a passed drain deadline ends it with os.ErrDeadlineExceeded) and
// flushes the last partial segment.
func (f *Forwarder) Run(r io.Reader) error {
	pr, pooled := r.(pooledReader)
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
	last := max(bytes.LastIndexByte(chunk, '\n'), bytes.LastIndexByte(chunk, '\r'))
	if last < 0 {
		f.pending = append(f.pending, chunk...)
		for len(f.pending) >= maxLine {
			f.emit(f.pending[:maxLine], true)
			f.pending = append(f.pending[:0], f.pending[maxLine:]...)
		}
		f.armIdle()
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
	_, _ = f.Console.Write(f.out)
	if f.pending = append(f.pending, chunk[last+1:]...); len(f.pending) > 0 {
		f.armIdle()
	}
	if cap(f.out) > 4*readSize {
		f.out = nil // do not keep a huge buffer after one long line
	}
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

// armIdle (f.mu held) shows the pending partial segment once ShowPartial passes without more bytes.
func (f *Forwarder) armIdle() {
	d := f.ShowPartial
	if d <= 0 {
		return
	}
	if f.idle == nil {
		f.idle = time.AfterFunc(d, f.showPartial)
		return
	}
	f.idle.Reset(d)
}

// showPartial shows the pending partial segment as it is: the console's cursor stays after it, and the rest of
// the segment continues it.
func (f *Forwarder) showPartial() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) == 0 {
		return
	}
	f.out = f.out[:0]
	if !f.midLine {
		f.out = append(f.out, f.Prefix...)
	}
	f.out = append(f.out, f.pending...)
	f.pending, f.midLine = f.pending[:0], true
	_, _ = f.Console.Write(f.out)
}

// emit (f.mu held) writes one prefixed piece of a line; newline adds the terminating newline the line lacks.
func (f *Forwarder) emit(line []byte, newline bool) {
	f.out = f.out[:0]
	if !f.midLine {
		f.out = append(f.out, f.Prefix...)
	}
	f.out = append(f.out, line...)
	if newline {
		f.out = append(f.out, '\n')
	}
	f.midLine = false
	_, _ = f.Console.Write(f.out)
}

// flush shows what is left at the stream's end. A prefixed stream ends its last line (the next one shown is
// another worker's); raw output stays as the worker wrote it.
func (f *Forwarder) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle != nil {
		f.idle.Stop()
	}
	prefixed := len(f.Prefix) > 0
	if f.Console != nil && (len(f.pending) > 0 || f.midLine && prefixed) {
		f.emit(f.pending, prefixed)
	}
	f.pending, f.out, f.midLine = nil, nil, false
}

// Tail keeps the last tailSize bytes written to it (a worker's stderr, for the report of its failure).
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *Tail) add(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailSize {
		t.buf = append(t.buf[:0], p[len(p)-tailSize:]...)
		return
	}
	if over := len(t.buf) + len(p) - tailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

// Lines returns up to n last complete-or-final lines.
func (t *Tail) Lines(n int) []string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	all := strings.Split(s, "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

// Prefix expands a --log-prefix template for one worker: {rank}, {local_rank}, {node} and {role} are replaced,
// and so are torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE names ($rank, ${local_rank}, $role_name; a Python
// string.Template under torchrun). Anything else, an unknown $name included, is kept as written.
func Prefix(template string, rank, localRank, node int, role string) string {
	vals := map[string]string{"rank": strconv.Itoa(rank), "local_rank": strconv.Itoa(localRank), "node": strconv.Itoa(node),
		"role": role, "role_name": role}
	var b strings.Builder
	for i := 0; i < len(template); {
		if v, n := prefixVar(template[i:], vals); n > 0 {
			b.WriteString(v)
			i += n
			continue
		}
		b.WriteByte(template[i])
		i++
	}
	return b.String()
}

// prefixVar reads one known variable at the start of t ({name}, ${name} or $name) and returns its value and the
// bytes it spans; n is 0 when t does not start with one.
func prefixVar(t string, vals map[string]string) (v string, n int) {
	name := ""
	switch {
	case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "${"):
		open := strings.IndexByte(t, '{')
		end := strings.IndexByte(t, '}')
		if end < 0 {
			return "", 0
		}
		name, n = t[open+1:end], end+1
	case strings.HasPrefix(t, "$"):
		n = 1
		for n < len(t) && (t[n] == '_' || t[n] >= 'a' && t[n] <= 'z' || t[n] >= 'A' && t[n] <= 'Z' || n > 1 && t[n] >= '0' && t[n] <= '9') {
			n++
		}
		name = t[1:n]
	default:
		return "", 0
	}
	if v, ok := vals[name]; ok {
		return v, n
	}
	return "", 0
}

