package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/results"
)

// TestJSONFD: --json-fd N writes --json's document on the caller's descriptor N and leaves stdout to the workers
// (what tpurun.spawn uses, so that a notebook cell shows the workers' prints as output, not as stderr); no worker
// inherits the descriptor, so the caller's end of file comes when tpurun exits, not when a worker's child does.
func TestJSONFD(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	pipe := "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]"
	// each worker prints its rank on stdout, a line on stderr, and what its descriptors are
	script := `echo "out $RANK"; echo "err $RANK" >&2; for f in /proc/self/fd/*; do readlink "$f"; done | sed 's/^/fd /' >&2`
	cmd := exec.Command(filepath.Join(bin, "tpurun"), "--json-fd", "3", "--nprocs", "2", "--", "sh", "-c", script)
	cmd.ExtraFiles = []*os.File{w}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	docBytes, rerr := io.ReadAll(r) // end of file: tpurun exited, and nothing else held the write end
	if err := cmd.Wait(); err != nil || rerr != nil {
		t.Fatalf("tpurun: %v, read: %v\nstderr:\n%s", err, rerr, errb.String())
	}
	var doc results.Document
	if err := json.Unmarshal(docBytes, &doc); err != nil || !doc.OK || len(doc.Ranks) != 2 {
		t.Fatalf("the document on fd 3: %v\n%q", err, docBytes)
	}
	if o := out.String(); !strings.Contains(o, "out 0\n") || !strings.Contains(o, "out 1\n") || strings.Contains(o, `"run_id"`) {
		t.Fatalf("stdout should hold the workers' stdout and no document:\n%s", o)
	}
	if e := errb.String(); !strings.Contains(e, "err 0\n") || strings.Contains(e, "out 0") || strings.Contains(e, "fd "+pipe) {
		t.Fatalf("stderr should hold the workers' stderr, and no worker the document's descriptor (%s):\n%s", pipe, e)
	}
}

// TestJSONFDRefused: a descriptor that is not open, one of stdin, stdout and stderr, or one that is not open for
// writing (the read end the caller passed by mistake; the Go runtime's own read-only files, which a number the
// caller never passed may name) is a usage error naming the flag, before anything starts.
func TestJSONFDRefused(t *testing.T) {
	t.Parallel()
	for _, fd := range []string{"1", "2", "57"} {
		r := runCLI(t, t.TempDir(), nil, "--json-fd", fd, "--", "true")
		if r.code != failure.ExitUsage || !strings.Contains(r.stderr, "--json-fd") {
			t.Errorf("--json-fd %s: exit %d, want %d naming the flag\n%s", fd, r.code, failure.ExitUsage, r.stderr)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), "--json-fd", "3", "--", "true")
	cmd.ExtraFiles = []*os.File{r} // the read end, as fd 3
	out, _ := cmd.CombinedOutput()
	r.Close()
	if code := cmd.ProcessState.ExitCode(); code != failure.ExitUsage || !strings.Contains(string(out), "not open for writing") {
		t.Errorf("--json-fd 3, the read end of a pipe: exit %d, want %d saying it is not open for writing\n%s", code, failure.ExitUsage, out)
	}
}
