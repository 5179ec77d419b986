package console

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
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

// DefaultPrefix is the line prefix of a worker's output when none is given (tpurun --log-prefix): its rank.
const DefaultPrefix = "[{rank}] "

// Forwarder copies one stream of one worker: prefixed, whole lines to the console, raw bytes to the log file,
// and the last bytes into a tail for the report.
type Forwarder struct {
	Prefix  []byte
	Console io.Writer // nil: not shown on the console
	File    io.Writer // nil: no log file
	Tail    *Tail     // nil: not kept
	pending []byte
	out     []byte
}

// readBufs are the read buffers of the forwarders. A forwarder of a worker's pipe (drainReader) holds one only
// from the moment the pipe has data until it has fed it on: hundreds of idle workers hold none.
var readBufs = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// pooledReader reads into a buffer of readBufs that it takes once data has arrived; the caller puts it back.
type pooledReader interface {
	readPooled() (buf *[]byte, n int, err error)
}

// Run reads r until EOF or a read error (a passed drain deadline ends it with os.ErrDeadlineExceeded) and
// flushes the last partial line.
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
	last := bytes.LastIndexByte(chunk, '\n')
	if last < 0 {
		f.pending = append(f.pending, chunk...)
		for len(f.pending) >= maxLine {
			f.emit(f.pending[:maxLine], true)
			f.pending = append(f.pending[:0], f.pending[maxLine:]...)
		}
		return
	}
	f.out = f.out[:0]
	complete := chunk[:last+1]
	first := true
	for len(complete) > 0 {
		i := bytes.IndexByte(complete, '\n')
		f.out = append(f.out, f.Prefix...)
		if first {
			f.out = append(f.out, f.pending...)
			f.pending = f.pending[:0]
			first = false
		}
		f.out = append(f.out, complete[:i+1]...)
		complete = complete[i+1:]
	}
	_, _ = f.Console.Write(f.out)
	f.pending = append(f.pending, chunk[last+1:]...)
	if cap(f.out) > 4*readSize {
		f.out = nil // do not keep a huge buffer after one long line
	}
}

// emit writes one prefixed line; newline adds the terminating newline the line lacks.
func (f *Forwarder) emit(line []byte, newline bool) {
	f.out = append(append(f.out[:0], f.Prefix...), line...)
	if newline {
		f.out = append(f.out, '\n')
	}
	_, _ = f.Console.Write(f.out)
}

func (f *Forwarder) flush() {
	if f.Console != nil && len(f.pending) > 0 {
		f.emit(f.pending, true)
	}
	f.pending = nil
	f.out = nil
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
