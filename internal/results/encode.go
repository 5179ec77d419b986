package results

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"

	"tpurun/worker"
)

// encodeChunk is how many bytes of a value Encode hands its writer at a time: large values go through in pieces,
// so a writer that copies what it is given (a console) never holds a whole value twice.
const encodeChunk = 256 << 10

// Encode writes d to w as one line of compact JSON ending in a newline: the document json.Marshal writes (the same
// fields and values; json.Unmarshal of either gives the same Document), streamed. The values are not encoded
// again: a JSON value goes as the collector checked it (Consume: valid JSON in UTF-8; Add: decoded from a node's
// share), compacted only when it holds a line break (the document is one line), and a pickled value is base64 in
// pieces. Memory beyond d is a fixed buffer, whatever the size of the values.
func (d *Document) Encode(w io.Writer) error { return d.encode(w, false) }

// EncodeFramed writes d as Encode does, but each pickled value goes before the document, raw, as a result frame of
// worker/PROTOCOL.md (header, then the pickle's bytes as the worker sent them), in the order of d.Results; a
// newline follows the last frame, and in the document such a result carries "framed": true instead of "value_b64".
// It is tpurun --json-frames, for a reader that unpickles each value from the stream as it comes (tpurun.spawn):
// base64 inside JSON costs the reader five copies of every value (docs/BENCHMARKS.md, "Results at pipe speed").
func (d *Document) EncodeFramed(w io.Writer) error { return d.encode(w, true) }

func (d *Document) encode(w io.Writer, framed bool) error {
	rest := *d
	rest.Results = nil
	b, err := json.Marshal(&rest)
	if err != nil {
		return err
	}
	// The results go in place of the first "results":null: before it is only the run id, a JSON string, in which
	// every quote is escaped.
	head, tail, _ := bytes.Cut(b, []byte(`"results":null`))
	bw := bufio.NewWriterSize(w, encodeChunk)
	e := encoder{w: bw, framed: framed}
	if framed {
		e.frames(d.Results)
	}
	e.bytes(head)
	e.raw(`"results":`)
	e.results(d.Results)
	e.bytes(tail)
	e.raw("\n")
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// encoder writes to w and keeps the first error; after it, it writes nothing.
type encoder struct {
	w      *bufio.Writer
	framed bool // pickled values go as frames before the document (EncodeFramed)
	err    error
}

// frames writes a result frame for each pickled value of rs, then a newline when there was one.
func (e *encoder) frames(rs []Result) {
	var head []byte
	for i := range rs {
		if r := &rs[i]; len(r.ValueB64) > 0 {
			head = worker.AppendHeader(head[:0], worker.KindResult, worker.EncodingPickle, r.Replica, len(r.ValueB64))
			e.bytes(head)
			e.bytes(r.ValueB64)
		}
	}
	if head != nil {
		e.raw("\n")
	}
}

func (e *encoder) raw(s string) {
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *encoder) bytes(p []byte) {
	for len(p) > 0 && e.err == nil {
		n := min(len(p), encodeChunk)
		_, e.err = e.w.Write(p[:n])
		p = p[n:]
	}
}

func (e *encoder) results(rs []Result) {
	if rs == nil {
		e.raw("null")
		return
	}
	e.raw("[")
	for i := range rs {
		if i > 0 {
			e.raw(",")
		}
		e.result(&rs[i])
	}
	e.raw("]")
}

// result writes r: its fields but the value as json.Marshal writes them, then the value.
func (e *encoder) result(r *Result) {
	meta := *r
	meta.Value, meta.ValueB64 = nil, nil
	b, err := json.Marshal(meta)
	if err != nil {
		e.err = err
		return
	}
	e.bytes(b[:len(b)-1]) // without its closing brace: the value follows
	switch {
	case len(r.Value) > 0:
		e.raw(`,"value":`)
		e.value(r.Value)
	case len(r.ValueB64) > 0 && e.framed:
		e.raw(`,"framed":true`)
	case len(r.ValueB64) > 0:
		e.raw(`,"value_b64":"`)
		e.base64(r.ValueB64)
		e.raw(`"`)
	}
	e.raw("}")
}

// value writes a checked JSON value as it is, or compacted when it holds a line break (whitespace between its
// tokens: inside a JSON string a line break is escaped).
func (e *encoder) value(v json.RawMessage) {
	if bytes.IndexByte(v, '\n') < 0 && bytes.IndexByte(v, '\r') < 0 {
		e.bytes(v)
		return
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		e.err = err
		return
	}
	e.bytes(buf.Bytes())
}

// base64 writes p in standard base64, in pieces of encodeChunk bytes.
func (e *encoder) base64(p []byte) {
	const in = encodeChunk / 4 * 3
	out := make([]byte, base64.StdEncoding.EncodedLen(min(len(p), in)))
	for len(p) > 0 && e.err == nil {
		n := min(len(p), in)
		m := base64.StdEncoding.EncodedLen(n)
		base64.StdEncoding.Encode(out[:m], p[:n])
		_, e.err = e.w.Write(out[:m])
		p = p[n:]
	}
}
