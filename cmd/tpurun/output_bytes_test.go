package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"tpurun/internal/testutil"
)

// longJSON is the worker of TestOutputLongLineIsTheBytes: a line of JSON of 3,000,012 bytes on stdout and on
// stderr, each between short lines, all in the rank's own letter.
const longJSON = `
import json, os, sys
r = os.environ["RANK"]
line = json.dumps({"rank": r, "x": "ab"[int(r)] * 2_999_989}) + "\n"
assert len(line) == 3_000_012, len(line)
for f in (sys.stdout, sys.stderr):
    f.write("before %s\n" % r); f.flush()
    f.write(line); f.flush()
    f.write("after %s\n" % r); f.flush()
`

// TestOutputLongLineIsTheBytes: two workers, no prefix, no log options, each writes a 3,000,012-byte line of JSON
// to stdout and to stderr (three times what tpurun holds back of a line): tpurun's stdout and stderr hold each
// byte for byte (a newline was added per 1 MiB, and json.load failed), every line is whole, and a line of the
// other worker never gets into a long one.
func TestOutputLongLineIsTheBytes(t *testing.T) {
	t.Parallel()
	py := pythonExe(t)
	r := runCLI(t, "", nil, "--quiet", "--log-prefix=", "--nprocs", "2", "--", py, "-c", longJSON)
	if r.code != 0 {
		t.Fatalf("exit %d\n%.2000s", r.code, r.stderr)
	}
	for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
		seen := map[string]bool{}
		for l := range strings.Lines(out) {
			switch {
			case len(l) == 3_000_012:
				var v struct{ Rank, X string }
				if err := json.Unmarshal([]byte(l), &v); err != nil || v.X != strings.Repeat(string("ab"[v.Rank[0]-'0']), 2_999_989) {
					t.Fatalf("%s: a long line that is not the worker's: %v", name, err)
				}
				seen["long "+v.Rank] = true
			case strings.HasPrefix(l, "before ") || strings.HasPrefix(l, "after "):
				seen[strings.TrimSpace(l)] = true
			default:
				t.Fatalf("%s: a line of %d bytes that no worker wrote: %.100q...", name, len(l), l)
			}
		}
		if len(seen) != 6 {
			t.Fatalf("%s: %d of the 6 lines whole (%v); %d bytes, %d newlines", name, len(seen), seen, len(out), strings.Count(out, "\n"))
		}
	}
}

// orderly is the worker of TestOutputOneFileKeepsTheWorkersOrder: it writes to stdout and stderr by turns, each
// line at once; rank 0 then ends and rank 1 fails (exit 3) once rank 0 is done ($1 exists).
const orderly = `i=0; while [ $i -lt 300 ]; do echo "r$RANK out $i"; echo "r$RANK err $i" >&2; i=$((i+1)); done
if [ "$RANK" = 0 ]; then : >"$1"; exit 0; fi
while [ ! -e "$1" ]; do sleep 0.01; done; exit 3`

// checkOrder checks that each rank's lines are in out in the order its worker wrote them, and that the root cause
// shows the worker's last lines as one stream.
func checkOrder(t *testing.T, out string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^r(\d) (out|err) (\d+)\r?$`)
	next := map[string]int{} // rank: index of the next line expected, out i at 2i, err i at 2i+1
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[3])
		at := 2 * i
		if m[2] == "err" {
			at++
		}
		if at != next[m[1]] {
			t.Fatalf("rank %s's %q came at line %d of its output, want %d: stdout and stderr out of the worker's order\n%.3000q",
				m[1], m[0], next[m[1]], at, out)
		}
		next[m[1]]++
	}
	if next["0"] != 600 || next["1"] != 600 {
		t.Fatalf("%d and %d lines of ranks 0 and 1, want 600 each:\n%.3000s", next["0"], next["1"], out)
	}
	if !strings.Contains(out, "last output lines of rank 1:\n    r1 out 295\n    r1 err 295\n") {
		t.Fatalf("the root cause does not show the last output lines (stdout and stderr are one stream):\n%s", out[max(0, len(out)-2000):])
	}
}

// TestOutputOneFileKeepsTheWorkersOrder: when tpurun's stdout and stderr are one file (> f 2>&1, a terminal), a
// worker's stdout and stderr reach it in the order the worker wrote them, as a worker of torchrun writes both to
// that one file (two pipes read by two goroutines put a traceback before the prints before it).
func TestOutputOneFileKeepsTheWorkersOrder(t *testing.T) {
	t.Parallel()
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd, _, _ := tpurun("", nil, "--log-prefix=", "--nprocs", "2", "--", "/bin/sh", "-c", orderly, "sh", filepath.Join(t.TempDir(), "done"))
		cmd.Stdout, cmd.Stderr = f, f
		if code := testutil.WaitExit(t, cmd); code == 0 {
			t.Fatal("exit 0, want the workers' failure")
		}
		out, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		checkOrder(t, string(out))
	})
	t.Run("terminal", func(t *testing.T) {
		t.Parallel()
		p, cmd, _ := onPty(t, false, "--log-prefix=", "--nprocs", "2", "--", "/bin/sh", "-c", orderly, "sh", filepath.Join(t.TempDir(), "done"))
		if code := exitOf(t, p, cmd); code == 0 {
			t.Fatalf("exit 0, want the workers' failure")
		}
		checkOrder(t, p.output())
	})
}

// TestOutputPartialLineShownWhilePaused: `tpurun ... | tee log`: a worker that writes "Downloading dataset... "
// (no newline) and then works (here: waits for a line on its stdin) has its text shown while it works, after
// PartialAfter, not only once its line ends (an input() prompt behind a pipe was invisible until Enter).
func TestOutputPartialLineShownWhilePaused(t *testing.T) {
	t.Parallel()
	cmd, _, _ := tpurun("", nil, "--log-prefix=", "--nprocs", "1", "--", "/bin/sh", "-c", `printf 'Downloading dataset... '; read -r go; echo "done $go"`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var mu sync.Mutex
	var got []byte
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := stdout.Read(buf)
			mu.Lock()
			got = append(got, buf[:n]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shown := func() string { mu.Lock(); defer mu.Unlock(); return string(got) }
	testutil.WaitFor(t, "the partial line on tpurun's stdout while the worker waits", func() error {
		if s := shown(); s != "Downloading dataset... " {
			return fmt.Errorf("stdout %q", s)
		}
		return nil
	})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	code := testutil.WaitExit(t, cmd)
	<-read
	if code != 0 || shown() != "Downloading dataset... done go\n" {
		t.Fatalf("exit %d, stdout %q: want 0 and the worker's bytes", code, shown())
	}
}

// frames is the worker of TestOutputTerminalFramesWhole: rank 0 draws a progress bar at position 1 as tqdm does,
// each frame in one write (a newline, a carriage return, the bar, a cursor-up escape, no newline at the end),
// while rank 1 writes lines until rank 0 is done.
const frames = `
import os, sys, time
done = sys.argv[1]
if os.environ["RANK"] == "0":
    for i in range(8):
        os.write(1, b"\n\r bar %d/8 |" % i + b"#" * i + b"\x1b[A")
        time.sleep(0.2)
    open(done, "w").close()
else:
    i = 0
    while not os.path.exists(done):
        os.write(1, b"rank 1 line %d\n" % i)
        i += 1
        time.sleep(0.002)
`

// TestOutputTerminalFramesWhole: at a terminal, what a worker writes in one write reaches the terminal in one piece:
// the frames of a progress bar at position=rank stay whole while another worker writes lines, so the bar redraws in
// place (its frame was cut after the carriage return, and the other worker's lines got into it).
func TestOutputTerminalFramesWhole(t *testing.T) {
	t.Parallel()
	py := pythonExe(t)
	done := filepath.Join(t.TempDir(), "done")
	p, cmd, _ := onPty(t, false, "--log-prefix=", "--nprocs", "2", "--", py, "-c", frames, done)
	if code := exitOf(t, p, cmd); code != 0 {
		t.Fatalf("exit %d\n%.3000q", code, p.output())
	}
	out := p.output()
	for i := range 8 {
		frame := fmt.Sprintf("\n\r bar %d/8 |%s\x1b[A", i, strings.Repeat("#", i))
		if !strings.Contains(out, frame) {
			t.Fatalf("frame %d is not whole on the terminal: %q\n%.3000q", i, frame, out)
		}
	}
}
