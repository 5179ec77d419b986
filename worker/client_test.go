package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
	t.Setenv(EnvReplicas, "")
	t.Setenv(EnvRank, "6")
	if r, err := Replicas(); err != nil || len(r) != 1 || r[0] != 6 {
		t.Fatalf("RANK fallback: %v, %v", r, err)
	}
	t.Setenv(EnvReplicas, "1,3")
	if r, err := Replicas(); err != nil || len(r) != 2 || r[1] != 3 {
		t.Fatalf("TPURUN_REPLICAS: %v, %v", r, err)
	}
	t.Setenv(EnvReplicas, "")
	t.Setenv(EnvRank, "")
	if _, err := Replicas(); !errors.Is(err, ErrNoChannel) {
		t.Fatalf("neither set: %v", err)
	}
}

// TestInstallPython writes the embedded module and byte-compiles every file with the real interpreter.
func TestInstallPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python module tests: %v", err)
	}
	dir, err := InstallPython(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"__init__.py", "_wire.py", "fn.py", "_spawn.py"} {
		p := filepath.Join(dir, "tpurun", name)
		if out, err := exec.Command(py, "-m", "py_compile", p).CombinedOutput(); err != nil {
			t.Fatalf("%s does not compile: %v\n%s", p, err, out)
		}
	}
	// Installing again over an existing tree works (upgrade in place).
	if _, err := InstallPython(dir); err != nil {
		t.Fatal(err)
	}
	// The Python encoder writes byte-for-byte what the Go encoder writes.
	cmd := exec.Command(py, "-c", `import sys, tpurun._wire as w; sys.stdout.buffer.write(w.encode(w.KIND_RESULT, w.ENC_JSON, 3, b'[1]'))`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Encode(Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 3, Payload: []byte("[1]")})
	if !bytes.Equal(out, want) {
		t.Fatalf("Python frame %x, Go frame %x", out, want)
	}
}
