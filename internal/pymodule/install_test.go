package pymodule

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"tpurun/worker"
)

// TestInstall writes the embedded module into a private directory and byte-compiles every file with the real
// interpreter.
func TestInstall(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python module tests: %v", err)
	}
	dir, err := Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"__init__.py", "_wire.py", "fn.py", "_spawn.py"} {
		p := filepath.Join(dir, "tpurun", name)
		if out, err := exec.Command(py, "-m", "py_compile", p).CombinedOutput(); err != nil {
			t.Fatalf("%s does not compile: %v\n%s", p, err, out)
		}
	}
	// The Python encoder writes byte-for-byte what the Go encoder writes.
	cmd := exec.Command(py, "-c", `import sys, tpurun._wire as w; sys.stdout.buffer.write(w.encode(w.KIND_RESULT, w.ENC_JSON, 3, b'[1]'))`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := worker.Encode(worker.Frame{Kind: worker.KindResult, Encoding: worker.EncodingJSON, Replica: 3, Payload: []byte("[1]")})
	if !bytes.Equal(out, want) {
		t.Fatalf("Python frame %x, Go frame %x", out, want)
	}
}
