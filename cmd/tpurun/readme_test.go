package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMESpawnExampleAsWritten runs the README's Python example exactly as its lines say, from the repository
// root in a shell with tpurun on PATH and nothing else prepared (issue: "the README's own example fails as
// written"): the PYTHONPATH line, then spawn from examples/. Every replica's square must come back. Every other
// command line of the docs runs in docs.TestDocCommandsAsWritten (docs/commands_test.go).
func TestREADMESpawnExampleAsWritten(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	mustDo(t, err)
	var script []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "export PYTHONPATH=$(tpurun --python-path)") || strings.Contains(line, `tpurun.spawn("fn_square:square"`) {
			script = append(script, line)
		}
	}
	if len(script) != 2 {
		t.Fatalf("README: found %q, want the PYTHONPATH line and the spawn line", script)
	}
	python(t)
	cmd := exec.Command("sh", "-c", strings.Join(script, "\n"))
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the README's lines\n%s\nfailed: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(script, "\n"), err, out, stderr)
	}
	for _, want := range []string{"0: {'index': 0, 'square': 10,", "3: {'index': 3, 'square': 19,"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the README's spawn printed %q, want %q in it", out, want)
		}
	}
}
