package main

import (
	"bufio"
	stdjson "encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
)

// countLines reads r to EOF, after waiting first (a reader that is not there yet), at most rate bytes per second
// when rate > 0 (a steady slow reader), and returns the lines. The wait and the rate are the case under test (a
// reader late or slow by wall-clock time), not a synchronisation: the test asserts on what arrives, not when.
func countLines(r io.Reader, wait time.Duration, rate int) []string {
	time.Sleep(wait)
	if rate > 0 {
		r = &slowReader{r: r, rate: rate}
	}
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

type slowReader struct {
	r    io.Reader
	rate int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(p) > s.rate/25 {
		p = p[:s.rate/25]
	}
	time.Sleep(40 * time.Millisecond)
	return s.r.Read(p)
}

// TestOutputSlowReaderLosesNothing: `tpurun --nprocs 8 -- sh -c 'seq 1 4000; sleep .3; seq 4001 8000' | (sleep 4;
// cat)` delivers all 64 000 lines (it delivered about half: a 2 s drain deadline dropped what was still in the
// pipes), and so does a steady reader of 100 KB/s: a slow reader slows the workers, nothing is dropped.
func TestOutputSlowReaderLosesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		rate  int
		procs int
		n     int
	}{{"reader-late-4s", 4 * time.Second, 0, 8, 8000}, {"reader-100KBps", 0, 100_000, 4, 4000}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			half := strconv.Itoa(tc.n / 2)
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(bin, "tpurun"), "--nprocs", strconv.Itoa(tc.procs), "--", "sh", "-c",
				"seq 1 "+half+"; sleep .3; seq "+strconv.Itoa(tc.n/2+1)+" "+strconv.Itoa(tc.n))
			cmd.Stdout, cmd.Stderr = pw, io.Discard
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			got := make(chan []string)
			go func() { got <- countLines(pr, tc.wait, tc.rate) }()
			code := testutil.WaitExit(t, cmd)
			lines := <-got
			if code != 0 {
				t.Fatalf("tpurun: exit %d", code)
			}
			per := map[string]int{}
			for _, l := range lines {
				prefix, _, _ := strings.Cut(l, " ")
				per[prefix]++
			}
			if len(lines) != tc.procs*tc.n {
				t.Fatalf("%d lines arrived, want %d (per rank %v)", len(lines), tc.procs*tc.n, per)
			}
		})
	}
}

// TestOutputOneFileKeepsLinesWhole: with stdout and stderr one pipe (2>&1 | cat), 4 ranks printing 10 000-byte
// lines to both streams (over PIPE_BUF) and tpurun's own log lines never splice: every worker line arrives whole
// with its prefix, exactly once.
func TestOutputOneFileKeepsLinesWhole(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	const ranks, n = 4, 100
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("long:" + strconv.Itoa(n))}, "-v", "--nprocs", strconv.Itoa(ranks), "--", testutil.Program(t))
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got := make(chan []string)
	go func() { got <- countLines(pr, 0, 0) }()
	code := testutil.WaitExit(t, cmd)
	lines := <-got
	if code != 0 {
		t.Fatalf("tpurun: exit %d", code)
	}
	whole := regexp.MustCompile(`^\[(\d)\] rank (\d) (out|err) (\d+) (a+)$`)
	seen := map[string]bool{}
	for _, l := range lines {
		if m := whole.FindStringSubmatch(l); m != nil && m[1] == m[2] && len(m[5]) == 10_000 {
			seen[m[1]+m[3]+m[4]] = true
			continue
		}
		if strings.Contains(l, "aaaaaaaaaa") || strings.Contains(l, " out ") && strings.Contains(l, "rank ") {
			t.Fatalf("a spliced line (%d bytes): %.200q", len(l), l)
		}
	}
	if len(seen) != ranks*n*2 {
		t.Fatalf("%d whole worker lines, want %d", len(seen), ranks*n*2)
	}
	assertNothingLeft(t, dir, ranks)
}

// TestOutputClosedStdout: `tpurun ... | head -1`: the reader reads one line and goes away. tpurun stops the run
// (it died of SIGPIPE with no summary and left the grandchildren), kills everything it started, says why on
// stderr and exits 141 as a program killed by SIGPIPE would.
func TestOutputClosedStdout(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("flood:10000000"), testutil.FakeRank(1, "grandkids:0")}, "--nprocs", "2", "--grace", "1s", "--", testutil.Program(t))
	errb := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = pw, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	testutil.WaitReady(t, dir, 2)                      // rank 1 is ready once both grandchildren recorded their pid
	first, err := bufio.NewReader(pr).ReadString('\n') // head -1
	if err != nil || !strings.Contains(first, "flood") {
		t.Fatalf("first line %q %v", first, err)
	}
	pr.Close()
	testutil.WaitExit(t, cmd)
	if code := cmd.ProcessState.ExitCode(); code != 141 {
		t.Fatalf("exit %d, want 141\n%s", code, errb.String())
	}
	for _, want := range []string{"writing stdout failed", "broken pipe", "attempt 0"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	assertNothingLeft(t, dir, 2+2)
}

// TestOutputLastFlush: the run is over (the summary is out) and tpurun waits for a reader that stopped reading its
// stdout, with lines still queued. When the reader goes away, the last write fails with EPIPE: tpurun says so and
// exits 141. At one SIGTERM it gives the flush up and exits 143, saying how much output was lost (a record with
// --log-format json). Before, it released its signals before that flush and died of SIGPIPE, or of SIGTERM, saying
// nothing.
func TestOutputLastFlush(t *testing.T) {
	t.Parallel()
	sigterm := func(_ *testing.T, cmd *exec.Cmd, _ *os.File) { _ = cmd.Process.Signal(syscall.SIGTERM) }
	for _, tc := range []struct {
		name string
		args []string
		end  func(t *testing.T, cmd *exec.Cmd, reader *os.File)
		code int
		want []string
	}{
		{"reader gone", nil, func(_ *testing.T, _ *exec.Cmd, r *os.File) { r.Close() }, 141, []string{"writing stdout failed", "broken pipe"}},
		{"SIGTERM", nil, sigterm, 143, []string{"tpurun: received SIGTERM during a write to stdout nobody read (at most "}},
		// every line on stderr a record, the last one too
		{"SIGTERM json", []string{"--log-format", "json"}, sigterm, 143, []string{`"msg":"tpurun exits"`, `received SIGTERM during a write to stdout nobody read`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pr.Close() })
			// 192 KB of lines: more than the pipe holds, less than tpurun queues, so that the worker exits.
			cmd, _, _ := tpurun(dir, []string{testutil.Fake("flood:3000")}, append(tc.args, "--nprocs", "1", "--", testutil.Program(t))...)
			errb := &testutil.Buffer{}
			cmd.Stdout, cmd.Stderr = pw, errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			testutil.Eventually(t, "the run's summary, and tpurun blocked writing its stdout", func() bool {
				return strings.Contains(errb.String(), "every worker exited 0") && testutil.BlockedWriting(cmd.Process.Pid, 1)
			})
			tc.end(t, cmd, pr)
			testutil.WaitExit(t, cmd)
			if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != tc.code {
				t.Fatalf("tpurun: %v, want exit %d\n%s", cmd.ProcessState, tc.code, errb.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errb.String())
				}
			}
			if tc.args != nil { // --log-format json
				for line := range strings.Lines(errb.String()) {
					if !strings.HasPrefix(line, "{") {
						t.Errorf("a line of stderr is not a record: %q", line)
					}
				}
			}
		})
	}
}

// TestOutputBothStalledOneStop: the worker has exited and been reaped, and both of tpurun's output files are pipes
// nobody reads, each with lines queued (100 KB of 10 KB lines each). One SIGTERM ends it, whichever step of the end
// of the run it comes in (the attempt's end, the conclusion, the last flush): exit 143, the output lost to it. It took
// a second one when it came in the last flush (the signal ended the wait for stdout; stderr's was waited for again)
// or before it, and a signal there left the exit code 0 with the output dropped.
func TestOutputBothStalledOneStop(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outR.Close(); errR.Close() })
	cmd, _, _ := tpurun(dir, []string{testutil.Fake("long:10")}, "--nprocs", "1", "--", testutil.Program(t))
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	errW.Close()
	testutil.WaitReady(t, dir, 1)
	worker := testutil.PIDs(t, dir)[0]
	pid := cmd.Process.Pid
	// Reaped, not only dead: tpurun reaps a worker once its attempt is over. A stop signal before tpurun has seen the
	// exit is a first, gentle stop of a running attempt, which waits for the readers (TestHostileStalledStderr).
	testutil.Eventually(t, "the worker reaped, and tpurun blocked writing its stdout or stderr", func() bool {
		return testutil.ProcState(worker) == "gone" && (testutil.BlockedWriting(pid, 1) || testutil.BlockedWriting(pid, 2))
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	testutil.WaitExit(t, cmd)
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != 143 {
		t.Fatalf("tpurun: %v at one SIGTERM, want exit 143", cmd.ProcessState)
	}
}

// TestOutputClosedStderr: `tpurun ... 2>&1 >out | head -1`: the reader of tpurun's stderr goes away. The run is
// stopped, tpurun exits 141 and says why on its stdout (README: "the reason on the other stream"); the line went to
// the closed stderr and was lost. With --json stdout carries the results document alone, still valid JSON: the
// reason is not appended to it.
func TestOutputClosedStderr(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", json), func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--nprocs", "1", "--grace", "1s", "--", testutil.Program(t)}
			if json {
				args = append([]string{"--json"}, args...)
			}
			cmd, out, _ := tpurun(dir, []string{testutil.Fake("errflood:1000000")}, args...)
			cmd.Stderr = pw
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil { // head -1
				t.Fatal(err)
			}
			pr.Close()
			if code := testutil.WaitExit(t, cmd); code != 141 {
				t.Fatalf("exit %d, want 141\nstdout:\n%s", code, out.String())
			}
			if json {
				var doc map[string]any
				if err := stdjson.Unmarshal(out.Bytes(), &doc); err != nil || doc["exit_code"] != float64(141) {
					t.Fatalf("stdout is not the results document alone (%v; exit_code %v):\n%s", err, doc["exit_code"], out.String())
				}
				return
			}
			if !strings.Contains(out.String(), "writing stderr failed") {
				t.Fatalf("stdout does not say why:\n%s", out.String())
			}
		})
	}
}

// TestOutputFullDisk: stdout on a full disk (a 64 KiB tmpfs) is a write error that stops the run with 74 and a
// message on stderr (lines were dropped with exit 0); `--json` into a full disk exits 74 (it wrote an empty
// document with exit 0).
func TestOutputFullDisk(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "tmpfs")
	disk := t.TempDir()
	if err := syscall.Mount("tpurun-test", disk, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a 64k tmpfs on %s: %v", disk, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	for i, tc := range []struct {
		fault string
		args  []string
	}{
		{"flood:100000", nil},                 // 6.4 MB of lines for 64 KiB
		{"report", []string{"--json"}},        // the document after the disk is full
		{"exit:0", []string{"--nprocs", "1"}}, // even the summary-free run: the file was filled beforehand
	} {
		dir := testutil.FakeDir(t)
		out, err := os.Create(filepath.Join(disk, fmt.Sprintf("out%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if tc.fault != "flood:100000" { // fill the disk first
			_, _ = out.Write(make([]byte, 128<<10))
		}
		cmd, _, errb := tpurun(dir, []string{testutil.Fake(tc.fault)}, append(append([]string{"--nprocs", "2"}, tc.args...), "--", testutil.Program(t))...)
		cmd.Stdout = out
		testutil.WaitExit(t, cmd)
		out.Close()
		if code := cmd.ProcessState.ExitCode(); code != 74 || !strings.Contains(errb.String(), "no space left on device") {
			t.Errorf("%s %v: exit %d, want 74 naming the full disk\n%s", tc.fault, tc.args, code, errb.String())
		}
		assertNothingLeft(t, dir, 0)
		_ = os.Remove(out.Name())
	}
}

// TestOutputAsTorchrunShowsIt: without a prefix asked for, the workers' bytes reach tpurun's stdout as written, as
// under torchrun (no "[0] "); --tee prefixes as torchrun does ("[default0]:"); torchrun's template or --log-prefix
// give a prefix of one's own.
func TestOutputAsTorchrunShowsIt(t *testing.T) {
	t.Parallel()
	say := []string{"--", "/bin/sh", "-c", `printf 'rank %s\r\n' "$RANK"; printf 'no newline %s' "$RANK"`}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		pre  string // rank N's prefix, with N for the rank
	}{
		{"default", nil, nil, ""},
		{"tee", nil, []string{"--tee", "3", "--log-dir", "{dir}"}, "[defaultN]:"},
		{"template", []string{prefixTemplate + "=<${local_rank}> "}, nil, "<N> "},
		{"log-prefix", []string{prefixTemplate + "=<${local_rank}> "}, []string{"--log-prefix", "{rank}|"}, "N|"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{"--nprocs", "2"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "{dir}", dir))
			}
			r := runCLI(t, "", append([]string{prefixTemplate + "="}, tc.env...), append(args, say...)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			// Each rank's segments, in its order; the two ranks' segments may alternate, a segment is never split.
			total := 0
			for rank := range 2 {
				pre := strings.ReplaceAll(tc.pre, "N", strconv.Itoa(rank))
				segs := []string{pre + "rank " + strconv.Itoa(rank) + "\r", pre + "\n", pre + "no newline " + strconv.Itoa(rank)}
				if tc.pre == "" {
					segs = []string{"rank " + strconv.Itoa(rank) + "\r\n", "no newline " + strconv.Itoa(rank)}
				} else {
					segs[2] += "\n" // a prefixed stream's last line ends
				}
				at := 0
				for _, seg := range segs {
					i := strings.Index(r.stdout[at:], seg)
					if i < 0 {
						t.Fatalf("stdout lacks rank %d's %q after its earlier segments:\n%q", rank, seg, r.stdout)
					}
					at += i + len(seg)
					total += len(seg)
				}
			}
			if len(r.stdout) != total {
				t.Errorf("stdout has %d bytes, not the %d of the workers' segments:\n%q", len(r.stdout), total, r.stdout)
			}
		})
	}
}

// TestOutputProgressShownAsItComes: at a terminal, a worker that redraws a line with "\r" (tqdm's way) and has not
// written a newline yet has its text on the terminal while it still runs: here it waits for the test to see each
// update (typed on the terminal, which rank 0 reads) before it writes the next.
func TestOutputProgressShownAsItComes(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "[{rank}] "} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			t.Parallel()
			script := `printf '\rstep 1/2' >&2; read -r go; printf '\rstep 2/2' >&2; read -r go; printf '\n' >&2`
			// --quiet: tpurun's own "workers started" may come after the worker's first frame, into its open line
			// (a loaded machine, make test at 19:31 on 2026-12-06); this test is about the bar's frames alone
			p, cmd, _ := onPty(t, false, "--quiet", "--nprocs", "1", "--log-prefix", prefix, "--", "/bin/sh", "-c", script)
			pre := strings.ReplaceAll(prefix, "{rank}", "0")
			for _, want := range []string{pre + "\r" + pre + "step 1/2", pre + "\r" + pre + "step 1/2\r" + pre + "step 2/2"} {
				p.waitFor(fmt.Sprintf("%q on the terminal", want), func(out string) bool { return strings.Contains(out, want) })
				p.write("go\n")
			}
			if code := exitOf(t, p, cmd); code != 0 || !strings.Contains(p.output(), pre+"step 2/2\n") {
				t.Fatalf("exit %d, want 0 and the bar's last state ending its line:\n%q", code, p.output())
			}
		})
	}
}
