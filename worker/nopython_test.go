package worker_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGoWorkerCarriesNoPython: a Go worker (examples/hello, which imports this package) is built without the Python
// module's sources: their installation is the launcher's, not the workers' side. The marker is read from the
// sources first, so the test cannot pass because the marker went out of them.
func TestGoWorkerCarriesNoPython(t *testing.T) {
	marker := []byte("def report(")
	src, err := os.ReadFile(filepath.Join("python", "tpurun", "__init__.py"))
	if err != nil || !bytes.Contains(src, marker) {
		t.Fatalf("the Python module's __init__.py (%v) no longer holds %q: pick another marker", err, marker)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build examples/hello: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "hello")
	build := exec.Command(goTool, "build", "-o", bin, "tpurun/examples/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/hello: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, marker) {
		t.Errorf("the Go worker examples/hello holds %q: it embeds the Python module's sources", marker)
	}
}
