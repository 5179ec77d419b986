package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/pymodule"
	"tpurun/internal/results"
	"tpurun/internal/testutil"
	"tpurun/worker"
)

// resultWorkers is the environment of the Go result workers of each scenario (testutil's result verbs): every
// rank reports {"replica", "rank", "sq"} for each replica it owns, except rank 1 where it says otherwise.
//   - ok: every rank reports;
//   - seed: every rank reports replica 0 whatever it owns (xmp.spawn's "4 results for replica 0");
//   - foreign: rank 1 also reports replica 99;
//   - missing: rank 1 reports nothing and exits 0;
//   - big: rank 1 reports a 4 KiB string;
//   - huge: every rank reports a 5 MB string of its rank's last digit;
//   - garbage: rank 1 writes bytes that are not a frame instead;
//   - fail0: rank 1 reports an error for its replica and exits 0;
//   - exit7: rank 1 reports nothing and exits 7;
//   - truncated: rank 1 writes a frame header announcing 100 bytes and only 9 of them instead;
//   - restart: rank 1 exits 5 after reporting in attempt 0 (TORCHELASTIC_RESTART_COUNT=0).
func resultWorkers(mode string) []string {
	rank1 := map[string]string{"foreign": "foreign", "missing": "silent", "big": "big:4096", "garbage": "notaframe",
		"fail0": "fail:0", "exit7": "crash:7", "truncated": "cutframe", "restart": "reportfailfirst:5"}
	switch mode {
	case "seed":
		return []string{testutil.Fake("seed0")}
	case "huge":
		return []string{testutil.Fake("big:5000000")}
	case "ok":
		return []string{testutil.Fake("report")}
	}
	v, ok := rank1[mode]
	if !ok {
		panic("no result scenario " + mode)
	}
	return []string{testutil.Fake("report"), testutil.FakeRank(1, v)}
}

type goodValue struct{ Replica, Rank, Sq int }

// runResults runs the real binary with Go result workers in mode and returns the result, the --results
// document and the --json document.
func runResults(t *testing.T, mode string, n int, extra ...string) (result, *results.Document, *results.Document) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "results.json")
	args := append([]string{"--nprocs", strconv.Itoa(n), "--results", file, "--json"}, extra...)
	args = append(args, "--", testutil.Program(t))
	r := runCLI(t, t.TempDir(), resultWorkers(mode), args...)
	var fromFile, fromJSON results.Document
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("--results file: %v\nstderr:\n%s", err, r.stderr)
	}
	if err := json.Unmarshal(b, &fromFile); err != nil {
		t.Fatalf("--results file: %v: %s", err, b)
	}
	if err := json.Unmarshal([]byte(r.stdout), &fromJSON); err != nil {
		t.Fatalf("--json stdout is not only the document: %v\n%q", err, r.stdout)
	}
	if string(b) == "" || fromFile.RunID != fromJSON.RunID || fromFile.ExitCode != r.code || fromJSON.ExitCode != r.code {
		t.Fatalf("documents disagree with each other or with exit %d: file %+v json %+v", r.code, fromFile, fromJSON)
	}
	return r, &fromFile, &fromJSON
}

func checkGood(t *testing.T, doc *results.Document, replicas ...int) {
	t.Helper()
	got := map[int]bool{}
	for _, res := range doc.Results {
		if !res.OK {
			continue
		}
		var v goodValue
		if err := json.Unmarshal(res.Value, &v); err != nil || v.Replica != res.Replica || v.Sq != res.Replica*res.Replica ||
			v.Rank != res.Rank {
			t.Fatalf("result %+v (%s): %v", res, res.Value, err)
		}
		got[res.Replica] = true
	}
	for _, r := range replicas {
		if !got[r] {
			t.Fatalf("healthy replica %d missing from %+v", r, doc.Results)
		}
	}
}

func TestGoWorkersResultsFileAndJSON(t *testing.T) {
	t.Parallel()
	r, doc, _ := runResults(t, "ok", 4, "--expect-results")
	if r.code != 0 || !doc.OK || len(doc.Results) != 4 || len(doc.Ranks) != 4 || doc.World.Size != 4 || len(doc.Violations) != 0 {
		t.Fatalf("exit %d, document %+v\nstderr:\n%s", r.code, doc, r.stderr)
	}
	checkGood(t, doc, 0, 1, 2, 3)
	if !strings.Contains(r.stderr, "PEAK RSS") {
		t.Fatalf("with --json the summary goes to stderr:\n%s", r.stderr)
	}
}

func TestSeedScenarioDuplicateExit65(t *testing.T) {
	t.Parallel()
	r, doc, _ := runResults(t, "seed", 4)
	if r.code != failure.ExitResults {
		t.Fatalf("exit %d, want %d\n%s", r.code, failure.ExitResults, r.stderr)
	}
	if len(doc.Violations) != 1 || doc.Violations[0].Kind != "duplicate_result" ||
		!strings.HasPrefix(doc.Violations[0].Message, "4 results for replica 0: rank 0 pid ") ||
		!strings.Contains(doc.Violations[0].Hint, "SPMD") {
		t.Fatalf("violations %+v", doc.Violations)
	}
	if len(doc.Results) != 1 || doc.Results[0].Rank != 0 || !doc.Results[0].OK {
		t.Fatalf("the owner's result must be kept: %+v", doc.Results)
	}
	if !strings.Contains(r.stderr, "duplicate_result: 4 results for replica 0") || !strings.Contains(r.stderr, "hint: ") {
		t.Fatalf("stderr does not name the duplicate with its hint:\n%s", r.stderr)
	}
}

// TestResultsCheckedWithoutFlags: a plain run with no result flag still checks what workers report, so the seed
// scenario is never dropped silently.
func TestResultsCheckedWithoutFlags(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), resultWorkers("seed"), "--nprocs", "3", "--", testutil.Program(t))
	if r.code != failure.ExitResults || !strings.Contains(r.stderr, "duplicate_result: 3 results for replica 0") {
		t.Fatalf("exit %d, want %d naming the duplicate\n%s", r.code, failure.ExitResults, r.stderr)
	}
	if n := strings.Count(r.stderr, "3 results for replica 0"); n != 1 { // once, in the report
		t.Fatalf("the duplicate is reported %d times, want once:\n%s", n, r.stderr)
	}
}

func TestViolationsNamedExit65(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, kind string
		extra      []string
		want       int
		good       []int
	}{
		{"foreign", "foreign_replica", nil, failure.ExitResults, []int{0, 1, 2}},
		{"missing", "missing_result", []string{"--expect-results"}, failure.ExitResults, []int{0, 2}},
		{"big", "oversized_frame", []string{"--max-result-bytes", "1024"}, failure.ExitResults, []int{0, 2}},
		{"garbage", "malformed_frame", nil, failure.ExitResults, []int{0, 2}},
		{"truncated", "truncated_frame", nil, failure.ExitResults, []int{0, 2}},
		{"exit7", "missing_result", []string{"--expect-results"}, 7, nil}, // the others may be stopped before reporting
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			r, doc, _ := runResults(t, tc.mode, 3, tc.extra...)
			if r.code != tc.want {
				t.Fatalf("exit %d, want %d\n%s", r.code, tc.want, r.stderr)
			}
			checkGood(t, doc, tc.good...)
			if tc.want != failure.ExitResults { // a worker's own failure wins, and a failed worker is not "missing"
				if len(doc.Violations) != 0 {
					t.Fatalf("violations %+v", doc.Violations)
				}
				return
			}
			if len(doc.Violations) != 1 || doc.Violations[0].Kind != tc.kind || doc.Violations[0].Rank != 1 ||
				doc.Violations[0].Hint == "" {
				t.Fatalf("violations %+v", doc.Violations)
			}
			if !strings.Contains(r.stderr, "results: "+tc.kind+": ") {
				t.Fatalf("stderr does not name %s:\n%s", tc.kind, r.stderr)
			}
		})
	}
}

func TestReplicaErrorWithExit0Exits1(t *testing.T) {
	t.Parallel()
	r, doc, _ := runResults(t, "fail0", 3)
	if r.code != 1 || len(doc.Results) != 3 || doc.Results[1].OK || doc.Results[1].Error == nil ||
		doc.Results[1].Error.Message != "rank 1: loss is NaN" {
		t.Fatalf("exit %d, results %+v\n%s", r.code, doc.Results, r.stderr)
	}
	checkGood(t, doc, 0, 2)
}

// python is the interpreter for the Python tests: stdlib only, so any python3 on PATH will do.
func python(t *testing.T) string {
	t.Helper()
	return testutil.Need(t, "python3")
}

func examplesDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples")
}

func runFn(t *testing.T, target string, extra ...string) (result, *results.Document) {
	t.Helper()
	args := append([]string{"--nprocs", "3", "--json", "--python", python(t), "--fn",
		filepath.Join(examplesDir(t), "fn_square.py") + ":" + target}, extra...)
	tmp := t.TempDir()
	r := runCLI(t, t.TempDir(), []string{"TMPDIR=" + tmp}, args...)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("tpurun left %v in TMPDIR (the private Python module dir must be removed)", left)
	}
	var doc results.Document
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("--json stdout: %v\n%q\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	return r, &doc
}

func TestFnSquare(t *testing.T) {
	t.Parallel()
	r, doc := runFn(t, "square", "--fn-args-json", "[10]", "extra")
	if r.code != 0 || len(doc.Results) != 3 {
		t.Fatalf("exit %d %+v\n%s", r.code, doc, r.stderr)
	}
	for i, res := range doc.Results {
		var v struct {
			Index, Square, Rank int
			Rest                []string
		}
		if err := json.Unmarshal(res.Value, &v); err != nil || res.Replica != i || v.Index != i || v.Square != i*i+10 ||
			v.Rank != i || len(v.Rest) != 1 || v.Rest[0] != "extra" {
			t.Fatalf("replica %d: %s %v", i, res.Value, err)
		}
	}
}

func TestFnUnusableTargetExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ target, want string }{
		{"nested", "is a nested function"},
		{"no_such_function", "no_such_function"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			t.Parallel()
			r, _ := runFn(t, tc.target)
			if r.code != failure.ExitUsage || !strings.Contains(r.stderr, "tpurun: --fn ") || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, want 2 naming %q\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
	t.Run("missing module", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, t.TempDir(), nil, "--nprocs", "2", "--python", python(t), "--fn", "tpurun_no_such_module:f")
		if r.code != failure.ExitUsage || !strings.Contains(r.stderr, "no module named 'tpurun_no_such_module'") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})
}

func TestFnExceptionIsRootCause(t *testing.T) {
	t.Parallel()
	r, doc := runFn(t, "boom")
	// Rank 1's failure stops the others, so only replica 1's report is certain to be in the document.
	var failed *results.Result
	for i := range doc.Results {
		if doc.Results[i].Replica == 1 {
			failed = &doc.Results[i]
		}
	}
	if r.code != 1 || failed == nil || failed.OK || failed.Error == nil || failed.Error.Type != "ValueError" {
		t.Fatalf("exit %d, want 1 with replica 1 raising ValueError: %+v\n%s", r.code, doc.Results, r.stderr)
	}
	want := "root cause: replica 1 (rank 1, pid " + strconv.Itoa(failed.PID) + ") raised ValueError: replica 1 diverged"
	// With --json the traceback is in the document, and stderr names the exception without repeating it.
	if !strings.Contains(r.stderr, want) || !strings.Contains(failed.Error.Traceback, `line 32, in boom`) ||
		strings.Contains(r.stderr, `line 32, in boom`) {
		t.Fatalf("stderr lacks %q, or the traceback is not once, in the document (%q):\n%s", want, failed.Error.Traceback, r.stderr)
	}
}

func TestFnPickledReturn(t *testing.T) {
	t.Parallel()
	r, doc := runFn(t, "point")
	if r.code != 0 || len(doc.Results) != 3 {
		t.Fatalf("exit %d %+v\n%s", r.code, doc, r.stderr)
	}
	for _, res := range doc.Results {
		if res.Encoding != "pickle" || len(res.ValueB64) == 0 || !strings.Contains(string(res.ValueB64), "Point") {
			t.Fatalf("replica %d: %+v (%s)", res.Replica, res, base64.StdEncoding.EncodeToString(res.ValueB64))
		}
	}
}

// TestFnJSONFrames: --json-frames prints each pickled value raw, as a result frame of worker/PROTOCOL.md, before
// the document, which marks those results "framed" instead of carrying them in base64 (what tpurun.spawn reads):
// the frames hold the pickles --json carries, a replica each, and the rest of the document is --json's.
func TestFnJSONFrames(t *testing.T) {
	t.Parallel()
	_, plain := runFn(t, "point")
	r := runCLI(t, t.TempDir(), nil, "--nprocs", "3", "--json-frames", "--python", python(t), "--fn",
		filepath.Join(examplesDir(t), "fn_square.py")+":point")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	dec := worker.NewDecoder(strings.NewReader(r.stdout), 0, 0)
	frames := map[int][]byte{}
	for len(frames) < 3 {
		f, err := dec.Next()
		if err != nil || f.Kind != worker.KindResult || f.Encoding != worker.EncodingPickle {
			t.Fatalf("frame %d: %v %v %v\nstdout: %.300q", len(frames), f.Kind, f.Encoding, err, r.stdout)
		}
		frames[f.Replica] = f.Payload
	}
	var doc results.Document
	var raw struct {
		Results []map[string]any
	}
	rest := []byte(r.stdout[dec.Offset():])
	if err := json.Unmarshal(rest, &doc); err != nil || json.Unmarshal(rest, &raw) != nil || rest[0] != '\n' {
		t.Fatalf("after the frames: %v\n%.300q", err, rest)
	}
	for i, res := range plain.Results {
		if !bytes.Equal(frames[res.Replica], res.ValueB64) || raw.Results[i]["framed"] != true || doc.Results[i].ValueB64 != nil {
			t.Fatalf("replica %d: frame %q, document %v; want --json's pickle %q in the frame, and framed", res.Replica,
				frames[res.Replica], raw.Results[i], res.ValueB64)
		}
		doc.Results[i].ValueB64 = res.ValueB64
		doc.Results[i].PID, doc.Ranks[i].PID = res.PID, plain.Ranks[i].PID
	}
	doc.RunID = plain.RunID
	if a, b := fmt.Sprintf("%+v", doc), fmt.Sprintf("%+v", *plain); a != b {
		t.Fatalf("the framed document, values put back:\n%s\nwant --json's:\n%s", a, b)
	}

	// stdout and stderr one file (2>&1): the frames would be lost among the workers' lines; refused, saying so.
	cmd := exec.Command(filepath.Join(bin, "tpurun"), "--json-frames", "--", "true")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != failure.ExitUsage || !strings.Contains(string(out), "stdout and stderr are one file (2>&1)") {
		t.Fatalf("--json-frames 2>&1: exit %d (%v), want %d and why\n%s", code, err, failure.ExitUsage, out)
	}
}

func TestFnBadFlagsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--fn", "nocolon"},
		{"--fn", "m:f", "--fn-args-json", "{\"not\": \"a list\"}"},
		{"--fn-args-json", "[1]", "--", "true"},
		{"--max-result-bytes", "0", "--", "true"},
	} {
		r := runCLI(t, t.TempDir(), nil, args...)
		if r.code != failure.ExitUsage || !strings.Contains(r.stderr, args[0]) {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
}

// TestSpawnFromPython runs tpurun.spawn() in a real Python against the real binary.
func TestSpawnFromPython(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	// A success prints nothing of tpurun's own, as xmp.spawn prints nothing (the workers print nothing here); a
	// failure shows tpurun's report on stderr besides the SpawnError.
	script := `import io, sys, tpurun
sys.path.insert(0, sys.argv[2])
import fn_square
quiet, loud = io.StringIO(), io.StringIO()
res = tpurun.spawn(fn_square.square, args=(5,), nprocs=3, tpurun=sys.argv[1], stderr=quiet)
print(sorted((k, v["square"]) for k, v in res.items()))
try:
    tpurun.spawn("fn_square:boom", nprocs=2, tpurun=sys.argv[1], env=dict(__import__("os").environ, PYTHONPATH=sys.argv[2]), stderr=loud)
except tpurun.SpawnError as e:
    print("SpawnError", e.exit_code, str(e).splitlines()[0])
print("success printed %r" % quiet.getvalue())
print("failure printed the summary: %s" % ("tpurun: run " in loud.getvalue()))
`
	cmd := exec.Command(py, "-c", script, filepath.Join(bin, "tpurun"), examplesDir(t))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir+string(os.PathListSeparator)+examplesDir(t))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("%v\n%s\n%s", err, out, ee.Stderr)
	}
	want := "[(0, 5), (1, 6), (2, 9)]\nSpawnError 1 replica 1 (rank 1, pid "
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), "raised ValueError: replica 1 diverged") ||
		!strings.Contains(string(out), "success printed ''\n") || !strings.Contains(string(out), "failure printed the summary: True\n") {
		t.Fatalf("spawn printed %q, want prefix %q", out, want)
	}
}

// byValueScript is a script read from stdin (`python3 - TPURUN <<EOF`), as a notebook's cell is: its functions
// have no module the workers could import. With NO_CLOUDPICKLE set it makes cloudpickle unimportable, as Python
// itself blocks an import (None in sys.modules).
const byValueScript = `import os, sys
if os.environ.get("NO_CLOUDPICKLE"):
    sys.modules["cloudpickle"] = None
import tpurun

class Point:
    def __init__(self, x):
        self.x = x

def f(i, k):
    return {"i": i, "k": k}

def make():
    base = 10
    def inner(i, p):
        return Point(base + i + p.x)
    return inner

for name, fn, args, how in [("stdin", f, (3,), "fork"), ("lambda", lambda i: (i, "t"), (), "spawn"),
                            ("nested", make(), (Point(100),), "spawn")]:
    try:
        res = tpurun.spawn(fn, args=args, nprocs=2, start_method=how, tpurun=sys.argv[1])
        print(name, sorted((k, "Point(%d)" % v.x if isinstance(v, Point) else v) for k, v in res.items()))
    except Exception as e:
        print(name, type(e).__name__, e)
`

// TestSpawnByValue: with Debian's cloudpickle, tpurun.spawn runs functions the workers cannot import by name (one
// defined in a script on stdin, under start_method='fork' too; a lambda; a nested function taking and returning a
// class of that script) by value, on 2 workers, and their results come back; without cloudpickle each is refused
// before anything runs, with a message that names it (not the "<stdin> does not exist on this host" of before).
func TestSpawnByValue(t *testing.T) {
	t.Parallel()
	py := testutil.Need(t, "cloudpickle")
	dir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) string {
		cmd := exec.Command(py, "-", filepath.Join(bin, "tpurun"))
		cmd.Stdin = strings.NewReader(byValueScript)
		cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1"}, extra...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, out, stderr.String())
		}
		return string(out)
	}
	want := "stdin [(0, {'i': 0, 'k': 3}), (1, {'i': 1, 'k': 3})]\n" +
		"lambda [(0, (0, 't')), (1, (1, 't'))]\n" +
		"nested [(0, 'Point(110)'), (1, 'Point(111)')]\n"
	if got := run(); got != want {
		t.Fatalf("with cloudpickle, spawn printed\n%s\nwant\n%s", got, want)
	}
	got := run("NO_CLOUDPICKLE=1")
	for _, w := range []string{
		"stdin ValueError spawn(fn): __main__.f is defined in an interactive __main__ (a notebook, the REPL, a script on stdin or python -c), which the workers cannot import by name.",
		"lambda ValueError spawn(fn): __main__.<lambda> is a lambda, which the workers cannot import by name.",
		"nested ValueError spawn(fn): __main__.make.<locals>.inner is a nested function, which the workers cannot import by name.",
	} {
		if !strings.Contains(got, w+" tpurun.spawn sends such a function by value with cloudpickle, which is not importable here: "+
			"`pip install cloudpickle` (in the workers' Python too), or define the function with def at the top level of a module file\n") {
			t.Errorf("without cloudpickle, spawn printed\n%s\nwant a line %q and what to do", got, w)
		}
	}
}

// TestRestartCollectsAfresh: with --max-restarts each attempt has its own collector, so the results of the failed
// attempt 0 are neither duplicates nor in the document, which is the last attempt's.
func TestRestartCollectsAfresh(t *testing.T) {
	t.Parallel()
	r, doc, _ := runResults(t, "restart", 3, "--max-restarts", "1", "--expect-results")
	if r.code != 0 || !doc.OK || len(doc.Results) != 3 || len(doc.Violations) != 0 {
		t.Fatalf("exit %d, document %+v\n%s", r.code, doc, r.stderr)
	}
	checkGood(t, doc, 0, 1, 2)
	if !strings.Contains(r.stderr, "attempt 1: done") {
		t.Fatalf("no second attempt:\n%s", r.stderr)
	}
}

// TestFnTargetFileWithoutExtension: `--fn DIR/train:f` where train has no .py suffix (a script people run as
// `./train`) is loaded as Python source, not refused or crashed with an AttributeError; a file that does not
// exist is a named usage error.
func TestFnTargetFileWithoutExtension(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "train")
	if err := os.WriteFile(script, []byte("#!/usr/bin/env python3\ndef f(i, k):\n    return i * k\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, t.TempDir(), nil, "--nprocs", "2", "--json", "--python", python(t), "--fn", script+":f", "--fn-args-json", "[7]")
	var doc results.Document
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 || len(doc.Results) != 2 {
		t.Fatalf("exit %d, %v %+v\n%s", r.code, err, doc, r.stderr)
	}
	for i, res := range doc.Results {
		if string(res.Value) != strconv.Itoa(i*7) {
			t.Errorf("replica %d: %s, want %d", i, res.Value, i*7)
		}
	}
	r = runCLI(t, t.TempDir(), nil, "--nprocs", "2", "--python", python(t), "--fn", filepath.Join(dir, "absent")+":f")
	if r.code != failure.ExitUsage || !strings.Contains(r.stderr, "absent") || strings.Contains(r.stderr, "Traceback") {
		t.Fatalf("missing file: exit %d, want 2 naming it without a traceback\n%s", r.code, r.stderr)
	}
}
