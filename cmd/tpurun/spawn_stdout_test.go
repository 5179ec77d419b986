package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpawnStdoutOddCallers: tpurun.spawn forwards the workers' stdout to the caller's sys.stdout whatever that is
// (the results coming on a pipe of their own, --json-fd): a writer with write alone (contextlib.redirect_stdout to
// a minimal object, as logging shims do) gets the workers' lines and the run succeeds; a caller whose stdin and
// stdout are closed (a daemon started with <&- >&-), whose new pipe then takes descriptors 0 and 1, still gets its
// results (the descriptor passed to tpurun is from 3 up).
func TestSpawnStdoutOddCallers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shout := "def shout(index):\n    print('shout from', index, flush=True)\n    return index * index\n"
	if err := os.WriteFile(filepath.Join(dir, "shoutmod.py"), []byte(shout), 0o644); err != nil {
		t.Fatal(err)
	}
	r := pyRun(t, dir, spawnEnv(t), "-c", `import contextlib, sys, tpurun
class W:
    def __init__(self):
        self.got = []
    def write(self, s):
        self.got.append(s)
w = W()
with contextlib.redirect_stdout(w):
    res = tpurun.spawn("shoutmod:shout", nprocs=2, extra_args=["--device", "cpu"])
print(sorted(res.items()), "".join(w.got).count("shout from"), file=sys.stderr)
`)
	if r.code != 0 || !strings.Contains(r.stderr, "[(0, 0), (1, 1)] 2") {
		t.Fatalf("spawn with sys.stdout a writer without flush: exit %d, want the results and both workers' lines in the writer\nstderr:\n%s", r.code, r.stderr)
	}

	r = pyRun(t, dir, spawnEnv(t), "-c", `import os, sys, tpurun
os.close(0)
os.close(1)
res = tpurun.spawn("shoutmod:shout", nprocs=2, extra_args=["--device", "cpu"])
print(sorted(res.items()), file=sys.stderr, flush=True)
os._exit(0)  # the interpreter's own last flush of the closed stdout would exit 120
`)
	if r.code != 0 || !strings.Contains(r.stderr, "[(0, 0), (1, 1)]") {
		t.Fatalf("spawn with stdin and stdout closed: exit %d, want the results\nstderr:\n%s", r.code, r.stderr)
	}
}
