package worker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func mustEncode(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	frames := []Frame{
		{Kind: KindResult, Encoding: EncodingJSON, Replica: 0, Payload: []byte(`{"a":1}`)},
		{Kind: KindResult, Encoding: EncodingPickle, Replica: 7, Payload: []byte{0x80, 5, 0}},
		{Kind: KindError, Encoding: EncodingJSON, Replica: 1<<31 - 1, Payload: []byte(`{"type":"E","message":"m"}`)},
		{Kind: KindHello, Encoding: EncodingJSON, Replica: 0, Payload: []byte(`{}`)},
		{Kind: KindResult, Encoding: EncodingJSON, Replica: 3, Payload: bytes.Repeat([]byte("x"), 100000)},
	}
	var stream []byte
	for _, f := range frames {
		stream = append(stream, mustEncode(t, f)...)
	}
	d := NewDecoder(bytes.NewReader(stream), 1<<20, 0)
	for i, want := range frames {
		got, err := d.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Kind != want.Kind || got.Encoding != want.Encoding || got.Replica != want.Replica || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	if d.Offset() != int64(len(stream)) {
		t.Fatalf("offset %d, want %d", d.Offset(), len(stream))
	}
}

func header(magic string, version, kind, enc, reserved byte, replica, length uint32) []byte {
	b := append([]byte(magic), version, kind, enc, reserved)
	b = binary.BigEndian.AppendUint32(b, replica)
	return binary.BigEndian.AppendUint32(b, length)
}

// nasty are inputs a decoder must survive; they seed the fuzzer too.
var nasty = []struct {
	name   string
	in     []byte
	err    error
	inSync bool
}{
	{"garbage text", []byte("Traceback (most recent call last):\n  oops\n"), ErrMalformed, false},
	{"short header", []byte("TPRF\x01\x01"), ErrTruncated, false},
	{"bad version", header("TPRF", 9, 1, 1, 0, 0, 2), ErrUnknownVersion, false},
	{"version zero", header("TPRF", 0, 1, 1, 0, 0, 0), ErrUnknownVersion, false},
	{"oversized", append(header("TPRF", 1, 1, 1, 0, 0, 2000), make([]byte, 2000)...), ErrTooLarge, true},
	{"oversized and cut", append(header("TPRF", 1, 1, 1, 0, 0, 0xffffffff), 'x'), ErrTooLarge, false},
	{"truncated payload", append(header("TPRF", 1, 1, 1, 0, 0, 10), "12345"...), ErrTruncated, false},
	{"unknown kind", append(header("TPRF", 1, 9, 1, 0, 0, 2), "{}"...), ErrMalformed, true},
	{"unknown encoding", append(header("TPRF", 1, 1, 7, 0, 0, 2), "{}"...), ErrMalformed, true},
	{"pickled error", append(header("TPRF", 1, 2, 2, 0, 0, 2), "{}"...), ErrMalformed, true},
	{"reserved set", append(header("TPRF", 1, 1, 1, 1, 0, 2), "{}"...), ErrMalformed, true},
	{"replica over int32", append(header("TPRF", 1, 1, 1, 0, 0xffffffff, 2), "{}"...), ErrMalformed, true},
	{"lower-case magic", append(header("tprf", 1, 1, 1, 0, 0, 2), "{}"...), ErrMalformed, false},
}

func TestDecodeNasty(t *testing.T) {
	good := mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 4, Payload: []byte(`"ok"`)})
	for _, tc := range nasty {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if tc.inSync {
				in = append(slices.Clone(in), good...)
			}
			d := NewDecoder(bytes.NewReader(in), 1024, 0)
			_, err := d.Next()
			var fe *FrameError
			if !errors.As(err, &fe) || !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want a *FrameError wrapping %v", err, tc.err)
			}
			if fe.InSync != tc.inSync {
				t.Fatalf("InSync = %v, want %v (%v)", fe.InSync, tc.inSync, err)
			}
			f, err2 := d.Next()
			if tc.inSync {
				if err2 != nil || f.Replica != 4 {
					t.Fatalf("the good frame after an in-sync error: %+v, %v", f, err2)
				}
			} else if err2 != err {
				t.Fatalf("after a lost stream Next returned %v, want the sticky %v", err2, err)
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, f := range []Frame{
		{Kind: KindResult, Encoding: EncodingJSON, Replica: -1},
		{Kind: 0, Encoding: EncodingJSON},
		{Kind: KindError, Encoding: EncodingPickle},
		{Kind: KindResult, Encoding: 0},
	} {
		if _, err := Encode(f); !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode(%+v) = %v, want ErrMalformed", f, err)
		}
	}
}

func FuzzDecoder(f *testing.F) {
	for _, tc := range nasty {
		f.Add(tc.in)
	}
	f.Add(mustEncode(f, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 1, Payload: []byte(`[1,2]`)}))
	f.Add(append(mustEncode(f, Frame{Kind: KindError, Encoding: EncodingJSON, Payload: []byte(`{}`)}), "TPRF"...))
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 4096
		d := NewDecoder(bytes.NewReader(in), limit, 0)
		var frames []Frame
		for i := 0; ; i++ {
			fr, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var fe *FrameError
				if !errors.As(err, &fe) {
					t.Fatalf("error %v is not a *FrameError", err)
				}
				if !fe.InSync {
					if _, err2 := d.Next(); err2 != err {
						t.Fatalf("sticky error lost: %v then %v", err, err2)
					}
					break
				}
				continue
			}
			if len(fr.Payload) > limit {
				t.Fatalf("payload of %d bytes passed the %d limit", len(fr.Payload), limit)
			}
			frames = append(frames, fr)
			if i > len(in) {
				t.Fatal("more frames than bytes")
			}
		}
		if d.Offset() > int64(len(in)) {
			t.Fatalf("offset %d beyond input %d", d.Offset(), len(in))
		}
		// Every frame the decoder accepts must encode back to something it accepts identically.
		for _, fr := range frames {
			b, err := Encode(fr)
			if err != nil {
				t.Fatalf("accepted frame %+v does not encode: %v", fr, err)
			}
			g, err := NewDecoder(bytes.NewReader(b), limit, 0).Next()
			if err != nil || g.Kind != fr.Kind || g.Replica != fr.Replica || !bytes.Equal(g.Payload, fr.Payload) {
				t.Fatalf("re-decode of %+v: %+v, %v", fr, g, err)
			}
		}
	})
}

func TestParseReplicas(t *testing.T) {
	good := map[string][]int{"0": {0}, "0,1": {0, 1}, " 3 , 7": {3, 7}, "2147483647": {1<<31 - 1}}
	for in, want := range good {
		got, err := ParseReplicas(in)
		if err != nil || len(got) != len(want) {
			t.Fatalf("ParseReplicas(%q) = %v, %v", in, got, err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("ParseReplicas(%q) = %v, want %v", in, got, want)
			}
		}
		if back, _ := ParseReplicas(FormatReplicas(got)); len(back) != len(got) {
			t.Fatalf("FormatReplicas round trip of %v", got)
		}
	}
	for _, in := range []string{"", " ", "a", "1,", ",1", "-1", "1,1", "2147483648", "0x1", "1;2", "+1"} {
		_, err := ParseReplicas(in)
		var ee *EnvError
		if !errors.Is(err, ErrBadEnv) || !errors.As(err, &ee) || ee.Var != EnvReplicas || !strings.Contains(err.Error(), EnvReplicas) {
			t.Errorf("ParseReplicas(%q) = %v, want an *EnvError naming %s", in, err, EnvReplicas)
		}
	}
}

func FuzzParseReplicas(f *testing.F) {
	for _, s := range []string{"0", "0,1", "", "1,1", "-0", "99999999999", " 1 ,2", "\x00", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReplicas(s)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, v := range r {
			if v < 0 || seen[v] {
				t.Fatalf("ParseReplicas(%q) = %v: negative or duplicate", s, r)
			}
			seen[v] = true
		}
		again, err := ParseReplicas(FormatReplicas(r))
		if err != nil || len(again) != len(r) {
			t.Fatalf("round trip of %v: %v, %v", r, again, err)
		}
	})
}

// TestDecodeLargeChunked covers the chunked read of large JSON payloads: whole, and cut in the middle.
func TestDecodeLargeChunked(t *testing.T) {
	p := bytes.Repeat([]byte("z"), 3<<20)
	p[0], p[len(p)-1] = '"', '"'
	b := mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 2, Payload: p})
	f, err := NewDecoder(bytes.NewReader(b), 4<<20, 0).Next()
	if err != nil || !bytes.Equal(f.Payload, p) || !f.ValidJSON() {
		t.Fatalf("whole: %v valid=%v", err, f.ValidJSON())
	}
	p[1<<20] = '\n' // a control byte deep inside the string
	if f, _ := NewDecoder(bytes.NewReader(mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Payload: p})), 4<<20, 0).Next(); f.ValidJSON() {
		t.Fatal("a raw newline inside a large string was accepted")
	}
	cut := b[:HeaderSize+(2<<20)+5]
	d := NewDecoder(bytes.NewReader(cut), 4<<20, 0)
	_, err = d.Next()
	var fe *FrameError
	if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Got != int64(len(cut)) || d.Offset() != int64(len(cut)) {
		t.Fatalf("cut: %v (got %d, offset %d, want %d)", err, fe.Got, d.Offset(), len(cut))
	}
}

// allocDuring returns the bytes allocated on the heap while fn ran.
func allocDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// blockingReader returns in once, then tells waiting that the decoder asked for more and blocks until release.
type blockingReader struct {
	in      []byte
	waiting chan struct{}
	release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if len(r.in) > 0 {
		n := copy(p, r.in)
		r.in = r.in[n:]
		return n, nil
	}
	close(r.waiting)
	<-r.release
	return 0, io.ErrClosedPipe
}

// TestDecodeAllocatesWhatArrives: a header that declares a large payload costs no memory until the payload is
// really coming (a worker that dies after its header, times 256 workers).
func TestDecodeAllocatesWhatArrives(t *testing.T) {
	const declared, bufSize = DefaultMaxPayload, 64 << 10 // 64 MiB, the collector's read buffer
	const bound = 1 << 20                                 // the decoder and its buffer, with room to spare
	hdr := header("TPRF", 1, byte(KindResult), byte(EncodingJSON), 0, 0, declared)
	for _, arrived := range []int{0, 1, bufSize - 100} {
		in := append(slices.Clone(hdr), bytes.Repeat([]byte("a"), arrived)...)
		var err error
		var fe *FrameError
		got := allocDuring(func() { _, err = NewDecoder(bytes.NewReader(in), 0, bufSize).Next() })
		if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Got != int64(len(in)) {
			t.Fatalf("%d of %d bytes then EOF: %v, want ErrTruncated after %d bytes", arrived, declared, err, len(in))
		}
		if got > bound {
			t.Errorf("%d of %d declared bytes then EOF allocated %d bytes, want at most %d", arrived, declared, got, bound)
		}
	}

	// The header and then nothing: while the decoder waits for the payload it holds no more than its buffer.
	r := &blockingReader{in: hdr, waiting: make(chan struct{}), release: make(chan struct{})}
	var before, during runtime.MemStats
	runtime.ReadMemStats(&before)
	d := NewDecoder(r, 0, bufSize)
	done := make(chan error)
	go func() { _, err := d.Next(); done <- err }()
	<-r.waiting
	runtime.ReadMemStats(&during)
	close(r.release)
	if err := <-done; !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("after the reader failed: %v", err)
	}
	if got := during.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("waiting for the payload of a header declaring %d bytes: %d bytes allocated, want at most %d",
			declared, got, bound)
	}
}

// TestDecodeSizes: payloads of every size around the read buffer's arrive whole, read in pieces, and a cut one
// reports how much of it arrived.
func TestDecodeSizes(t *testing.T) {
	const bufSize = 4096
	for _, n := range []int{0, 1, bufSize - HeaderSize, bufSize - 1, bufSize, bufSize + 1, 16<<10 + 3,
		3<<20 + 7} {
		for _, enc := range []Encoding{EncodingJSON, EncodingPickle} {
			p := bytes.Repeat([]byte("q"), n)
			if n >= 2 {
				p[0], p[n-1] = '"', '"'
			}
			b := mustEncode(t, Frame{Kind: KindResult, Encoding: enc, Replica: 1, Payload: p})
			next := mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 2, Payload: []byte("[7]")})
			d := NewDecoder(iotest.HalfReader(bytes.NewReader(append(slices.Clone(b), next...))), 16<<20, bufSize)
			f, err := d.Next()
			if err != nil || !bytes.Equal(f.Payload, p) {
				t.Fatalf("%s payload of %d bytes: %v (got %d bytes)", enc, n, err, len(f.Payload))
			}
			if g, err := d.Next(); err != nil || g.Replica != 2 || string(g.Payload) != "[7]" {
				t.Fatalf("the frame after a %s payload of %d bytes: %v, %+v", enc, n, err, g)
			}
			if enc == EncodingJSON && n >= 2 && !f.ValidJSON() {
				t.Fatalf("json payload of %d bytes: not valid after decoding", n)
			}
			for _, cut := range []int{HeaderSize + n/2, HeaderSize + bufSize/2, len(b) - 1} {
				if cut >= len(b) || cut <= HeaderSize {
					continue
				}
				d := NewDecoder(iotest.HalfReader(bytes.NewReader(b[:cut])), 16<<20, bufSize)
				_, err := d.Next()
				var fe *FrameError
				if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Got != int64(cut) || d.Offset() != int64(cut) {
					t.Fatalf("%s payload of %d bytes cut at %d: %v (got %d, offset %d)", enc, n, cut, err, fe.Got, d.Offset())
				}
			}
		}
	}
}

// TestDecoderOfAnEmptyStreamHasNoBuffer: a worker that reports nothing costs its decoder no read buffer (hundreds
// of workers each held a 64 KiB one until they exited); a stream with frames still decodes through one.
func TestDecoderOfAnEmptyStreamHasNoBuffer(t *testing.T) {
	const bufSize = 64 << 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 64
	for range runs {
		d := NewDecoder(bytes.NewReader(nil), 0, bufSize)
		if _, err := d.Next(); err != io.EOF {
			t.Fatalf("empty stream: %v, want io.EOF", err)
		}
		if n, err := d.Drain(); n != 0 || err != nil {
			t.Fatalf("Drain of an empty stream: %d, %v", n, err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per >= bufSize/4 {
		t.Fatalf("decoding an empty stream allocated %d bytes, want no %d-byte buffer", per, bufSize)
	}
	payload := []byte(`{"x":1}`)
	stream := append(mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 2, Payload: payload}),
		mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 3, Payload: payload})...)
	d := NewDecoder(iotest.OneByteReader(bytes.NewReader(stream)), 0, bufSize)
	for _, rep := range []int{2, 3} {
		f, err := d.Next()
		if err != nil || f.Replica != rep || !bytes.Equal(f.Payload, payload) {
			t.Fatalf("frame %+v, %v; want replica %d with %s", f, err, rep, payload)
		}
	}
	if _, err := d.Next(); err != io.EOF || d.Offset() != int64(len(stream)) {
		t.Fatalf("after two frames: %v at %d, want io.EOF at %d", err, d.Offset(), len(stream))
	}
}

// BenchmarkDecodePipeJSON decodes and checks a 32 MiB JSON string result read from a pipe, as the collector does.
func BenchmarkDecodePipeJSON(b *testing.B) {
	p := bytes.Repeat([]byte("abcdefgh"), 4<<20)
	p[0], p[len(p)-1] = '"', '"'
	frame := mustEncode(b, Frame{Kind: KindResult, Encoding: EncodingJSON, Payload: p})
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			w.Write(frame)
			w.Close()
		}()
		f, err := NewDecoder(r, 0, 64<<10).Next()
		if err != nil || f.CheckJSON() != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}
