package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/internal/testutil"
)

// notebookCell is what a test reads of an executed notebook's code cell: its source and its outputs.
type notebookCell struct {
	CellType string          `json:"cell_type"`
	Source   json.RawMessage `json:"source"`
	Outputs  []struct {
		OutputType string          `json:"output_type"`
		Name       string          `json:"name"`  // a stream's: stdout or stderr
		Text       json.RawMessage `json:"text"`  // a stream's: a string or a list of strings
		Ename      string          `json:"ename"` // an error's
		Evalue     string          `json:"evalue"`
	} `json:"outputs"`
}

// notebookText joins nbformat's multiline string: a string, or a list of strings.
func notebookText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		return strings.Join(lines, "")
	}
	var s string
	mustDo(t, json.Unmarshal(raw, &s))
	return s
}

// TestNotebookAsWritten runs the README's notebook line as written (PYTHONPATH from tpurun --python-path, then
// Debian's jupyter nbconvert executing examples/spawn.ipynb in the default python3 kernel, /usr/bin/python3), from
// a copy of examples/ in a shell with tpurun on PATH, and reads the executed notebook back: the function, the lambda
// and the closure defined in its cells ran in the workers and their results came back; what the workers printed
// on stdout is the cell's output, on stderr its stderr stream, or both its output with stderr=sys.stdout; no cell
// raised.
func TestNotebookAsWritten(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "jupyter")
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	mustDo(t, err)
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "PYTHONPATH=$(tpurun --python-path) jupyter nbconvert ") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "--execute examples/spawn.ipynb") {
		t.Fatalf("README: no line PYTHONPATH=$(tpurun --python-path) jupyter nbconvert ... --execute examples/spawn.ipynb (found %q)", line)
	}
	dir := t.TempDir()
	nb, err := os.ReadFile(filepath.Join("..", "..", "examples", "spawn.ipynb"))
	mustDo(t, err)
	mustDo(t, os.MkdirAll(filepath.Join(dir, "examples"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dir, "examples", "spawn.ipynb"), nb, 0o644))
	cmd := exec.Command("sh", "-e", "-c", line)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir(), "LANG=C.UTF-8"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's line\n%s\nfailed: %v\n%s", line, err, out)
	}
	executed, err := os.ReadFile(filepath.Join(dir, "examples", "spawn.nbconvert.ipynb"))
	mustDo(t, err)
	var doc struct{ Cells []notebookCell }
	mustDo(t, json.Unmarshal(executed, &doc))
	streams := map[string]string{} // "<cell's first source line> <stream>" -> what the cell printed there
	for _, c := range doc.Cells {
		if c.CellType != "code" {
			continue
		}
		first, _, _ := strings.Cut(notebookText(t, c.Source), "\n")
		for _, o := range c.Outputs {
			switch o.OutputType {
			case "stream":
				streams[first+" "+o.Name] += notebookText(t, o.Text)
			case "error":
				t.Errorf("cell %q raised %s: %s", first, o.Ename, o.Evalue)
			}
		}
	}
	for _, w := range []struct{ cell, stream, want string }{
		{"def square(index, k):", "stdout", "function: {0: 10, 1: 11, 2: 14, 3: 19}\n"},
		{`print("lambda:", tpurun.spawn(lambda index: index + 100, nprocs=2))`, "stdout", "lambda: {0: 100, 1: 101}\n"},
		{"import sys", "stdout", "closure: {0: 0, 1: 3}\n"},
		{"import sys", "stdout", "worker 0 scales by 3\n"}, // the workers' stdout: the cell's output
		{"import sys", "stdout", "worker 1 scales by 3\n"},
		{"import sys", "stderr", "worker 0 on stderr\n"}, // their stderr: the cell's stderr stream
		{"import sys", "stderr", "worker 1 on stderr\n"},
		{`print("to stdout:", tpurun.spawn(scaler(5), nprocs=2, stderr=sys.stdout))`, "stdout", "worker 1 on stderr\n"},
		{`print("to stdout:", tpurun.spawn(scaler(5), nprocs=2, stderr=sys.stdout))`, "stdout", "to stdout: {0: 0, 1: 5}\n"},
	} {
		if got := streams[w.cell+" "+w.stream]; !strings.Contains(got, w.want) {
			t.Errorf("the cell %q printed %q on %s, want %q in it (every cell's streams: %q)", w.cell, got, w.stream, w.want, streams)
		}
	}
}
