package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// badUTF8 encodes to a JSON string holding a byte that is not UTF-8, which the launcher refuses.
type badUTF8 struct{}

func (badUTF8) MarshalJSON() ([]byte, error) { return []byte("\"\xff\""), nil }

func TestClientFrames(t *testing.T) {
	var buf lockedBuffer
	c := NewClient(&buf, []int{2, 5})
	if err := c.Report(2, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(5, fmt.Errorf("rank 5 diverged: %w", io.ErrUnexpectedEOF)); err != nil {
		t.Fatal(err)
	}
	if err := c.Report(3, 1); !errors.Is(err, ErrForeignReplica) {
		t.Fatalf("Report of a foreign replica: %v, want ErrForeignReplica", err)
	}
	if err := c.Report(2, json.RawMessage(`{bad`)); err == nil {
		t.Fatal("invalid json.RawMessage accepted")
	}
	if err := c.Report(2, func() {}); err == nil {
		t.Fatal("a func encoded as JSON")
	}
	if err := c.Report(2, badUTF8{}); err == nil || !strings.Contains(err.Error(), "worker.badUTF8 encodes to JSON the launcher refuses") {
		t.Fatalf("a value encoding to invalid UTF-8: %v, want refused naming its type", err)
	}
	d := NewDecoder(&buf.b, 0, 0)
	f, err := d.Next()
	if err != nil || f.Kind != KindResult || f.Replica != 2 || string(f.Payload) != `{"x":1}` {
		t.Fatalf("first frame %+v, %v", f, err)
	}
	f, err = d.Next()
	var info ErrorInfo
	if err != nil || f.Kind != KindError || json.Unmarshal(f.Payload, &info) != nil ||
		info.Type != "*fmt.wrapError" || info.Message != "rank 5 diverged: unexpected EOF" || info.Traceback == "" {
		t.Fatalf("error frame %+v %+v, %v", f, info, err)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("refused frames were written: %v", err)
	}
}

// TestClientConcurrent proves frames from many goroutines never interleave.
func TestClientConcurrent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(w, nil)
	const n, size = 16, 200000
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Report(i, bytes.Repeat([]byte{'a' + byte(i)}, size)); err != nil {
				t.Error(err)
			}
		}()
	}
	go func() { wg.Wait(); w.Close() }()
	d := NewDecoder(r, 0, 0)
	seen := map[int]bool{}
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		if err := json.Unmarshal(f.Payload, &b); err != nil || len(b) != size || bytes.Count(b, []byte{'a' + byte(f.Replica)}) != size {
			t.Fatalf("replica %d: interleaved or corrupted payload (%v)", f.Replica, err)
		}
		seen[f.Replica] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d replicas, want %d", len(seen), n)
	}
}

func TestOpenWithoutChannel(t *testing.T) {
	t.Setenv(EnvResultFD, "")
	_, err := Open()
	var ee *EnvError
	if !errors.Is(err, ErrNoChannel) || !errors.As(err, &ee) || ee.Var != EnvResultFD {
		t.Fatalf("Open without %s: %v", EnvResultFD, err)
	}
	t.Setenv(EnvResultFD, "x")
	if _, err := Open(); !errors.Is(err, ErrBadEnv) {
		t.Fatalf("Open with %s=x: %v", EnvResultFD, err)
	}
	t.Setenv(EnvResultFD, "987")
	if _, err := Open(); !errors.Is(err, ErrBadEnv) {
		t.Fatalf("Open with a closed descriptor: %v", err)
	}
}

func TestReplicasFromEnv(t *testing.T) {
	t.Setenv(EnvResultFD, "")
	t.Setenv(EnvReplicas, "1,3")
	if r, err := Replicas(); err != nil || len(r) != 2 || r[1] != 3 {
		t.Fatalf("TPURUN_REPLICAS: %v, %v", r, err)
	}
	// RANK is no replica: rank r owns 2r and 2r+1 on a host with two devices per process.
	t.Setenv(EnvReplicas, "")
	t.Setenv("RANK", "6")
	if r, err := Replicas(); !errors.Is(err, ErrNoChannel) {
		t.Fatalf("only RANK set: %v, %v; want ErrNoChannel", r, err)
	}
}

// TestOpenWithoutReplicas: a channel without TPURUN_REPLICAS is a broken environment, not a missing channel, and
// the error names both variables.
func TestOpenWithoutReplicas(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	t.Setenv(EnvResultFD, fmt.Sprint(w.Fd()))
	t.Setenv(EnvReplicas, "")
	t.Setenv("RANK", "1")
	for name, open := range map[string]func() error{
		"Open":     func() error { _, err := Open(); return err },
		"Replicas": func() error { _, err := Replicas(); return err },
	} {
		err := open()
		var ee *EnvError
		if !errors.Is(err, ErrBadEnv) || errors.Is(err, ErrNoChannel) || !errors.As(err, &ee) || ee.Var != EnvReplicas {
			t.Fatalf("%s with %s set and %s unset: %v; want ErrBadEnv for %s", name, EnvResultFD, EnvReplicas, err, EnvReplicas)
		}
		if msg := err.Error(); !strings.Contains(msg, EnvResultFD) || !strings.Contains(msg, EnvReplicas) {
			t.Fatalf("%s: %q does not name both %s and %s", name, msg, EnvResultFD, EnvReplicas)
		}
	}
}

// flakyWriter keeps what it is given and fails once: its call number failCall fails outright (writes nothing), or
// else the Write that reaches byte failAt keeps the bytes before it and fails. It accepts everything after (a
// transient failure: EINTR, a deadline).
type flakyWriter struct {
	b        bytes.Buffer
	failCall int
	failAt   int
	failed   bool
	calls    int
}

var errFlaky = errors.New("flaky writer failed")

func (w *flakyWriter) Write(p []byte) (int, error) {
	w.calls++
	if !w.failed && w.calls == w.failCall {
		w.failed = true
		return 0, errFlaky
	}
	if !w.failed && w.failCall == 0 && w.b.Len()+len(p) > w.failAt {
		w.failed = true
		n := w.failAt - w.b.Len()
		w.b.Write(p[:n])
		return n, errFlaky
	}
	return w.b.Write(p)
}

// TestClientWriteFailure: a write that fails leaves no lone header (the frame is one write) and the client sends
// nothing after it, so the launcher never reads a later frame as the rest of a cut one.
func TestClientWriteFailure(t *testing.T) {
	a := mustEncode(t, Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 0, Payload: []byte(`"first"`)})
	for _, tc := range []struct {
		name     string
		failCall int   // the write call that fails, writing nothing
		failAt   int   // or the byte where the writer fails
		want     []int // replicas of the frames a decoder reads whole
		cut      bool  // the stream ends inside a frame
	}{
		// Two writes per frame would leave the first frame's header alone here, and the next frame would be read
		// as its payload.
		{"the second write call fails, writing nothing", 2, 0, []int{0}, false},
		{"the second frame is cut at its first byte", 0, len(a), []int{0}, false},
		{"the second frame is cut after its header", 0, len(a) + HeaderSize, []int{0}, true},
		{"the second frame is cut mid-payload", 0, len(a) + HeaderSize + 3, []int{0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &flakyWriter{failCall: tc.failCall, failAt: tc.failAt}
			c := NewClient(w, nil)
			if err := c.Report(0, "first"); err != nil {
				t.Fatalf("first frame: %v", err)
			}
			err := c.Report(1, "second, cut or lost")
			if !errors.Is(err, errFlaky) || !errors.Is(err, ErrBrokenChannel) {
				t.Fatalf("the failed write returned %v, want the writer's error and ErrBrokenChannel", err)
			}
			calls := w.calls
			if err := c.Report(2, "third"); !errors.Is(err, ErrBrokenChannel) || !errors.Is(err, errFlaky) {
				t.Fatalf("a send after the failed write: %v, want ErrBrokenChannel naming the first failure", err)
			}
			if err := c.Fail(3, errors.New("boom")); !errors.Is(err, ErrBrokenChannel) {
				t.Fatalf("Fail after the failed write: %v, want ErrBrokenChannel", err)
			}
			if w.calls != calls {
				t.Fatalf("the client wrote %d more times after the failed write", w.calls-calls)
			}
			d := NewDecoder(&w.b, 0, 0)
			var got []int
			for {
				f, err := d.Next()
				if err == io.EOF {
					if tc.cut {
						t.Fatal("the cut frame was not reported as truncated")
					}
					break
				}
				if err != nil {
					if !tc.cut || !errors.Is(err, ErrTruncated) {
						t.Fatalf("after frames %v: %v", got, err)
					}
					break
				}
				got = append(got, f.Replica)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("decoded frames for replicas %v, want %v", got, tc.want)
			}
		})
	}

	// A real pipe whose reader is gone: the file path (writev) fails with EPIPE and breaks the channel too.
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	r.Close()
	c := NewClient(pw, nil)
	if err := c.Report(0, 1); !errors.Is(err, syscall.EPIPE) || !errors.Is(err, ErrBrokenChannel) {
		t.Fatalf("write to a pipe without a reader: %v, want EPIPE and ErrBrokenChannel", err)
	}
	if err := c.Report(1, 1); !errors.Is(err, ErrBrokenChannel) || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("send after EPIPE: %v", err)
	}
}

// TestClientPipeFrames: frames written with writev on a pipe arrive whole, also ones larger than the pipe.
func TestClientPipeFrames(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sizes := []int{0, 1, 4096, 1 << 20, 3<<20 + 5}
	go func() {
		defer w.Close()
		c := NewClient(w, nil)
		for i, n := range sizes {
			if err := c.Send(Frame{Kind: KindResult, Encoding: EncodingPickle, Replica: i, Payload: bytes.Repeat([]byte{byte(i)}, n)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	d := NewDecoder(r, 0, 0)
	for i, n := range sizes {
		f, err := d.Next()
		if err != nil || f.Replica != i || !bytes.Equal(f.Payload, bytes.Repeat([]byte{byte(i)}, n)) {
			t.Fatalf("frame %d of %d bytes: replica %d, %d bytes, %v", i, n, f.Replica, len(f.Payload), err)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
}
