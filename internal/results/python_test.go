package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/pymodule"
	"tpurun/internal/testutil"
	"tpurun/worker"
)

// fnmod is the user module the Python function-mode tests import.
const fnmod = `
import os

def square(index, k=1, *rest):
    return {"index": index, "sq": index * index * k, "rest": list(rest)}

def boom(index):
    raise ValueError("replica %d diverged" % index)

class Point:
    def __init__(self, x):
        self.x = x

def point(index):
    return Point(index)          # not JSON: pickled

def as_set(index):
    return {index, index + 1}    # not JSON: pickled

def outer():
    def inner(index):
        open(os.environ["MARKER"], "w").close()   # proves it was never called
        return index
    return inner

nested = outer()
lam = lambda index: open(os.environ["MARKER"], "w").close()
not_callable = 42

def sleepy(index):
    import time
    open(os.path.join(os.environ["MARKER_DIR"], str(index)), "w").close()
    time.sleep(120)
`

const pyReport = `
import tpurun, os, sys
for r in tpurun.replicas():
    tpurun.report(r, {"replica": r, "rank": int(os.environ["RANK"]), "lang": "py"})
`

const pyFail = `
import tpurun
def step():
    raise KeyError("missing shard")
try:
    step()
except Exception as e:
    tpurun.fail(tpurun.replicas()[0], e)
    raise SystemExit(1)
`

const pyGrandchild = `
import tpurun, subprocess, sys
p = subprocess.Popen(["sleep", "60"], close_fds=False)   # would inherit every inheritable fd
print(p.pid, flush=True)
tpurun.report(tpurun.replicas()[0], "after the grandchild")
`

type pyenv struct {
	py, dir, mod string
	env          []string
}

func newPy(t *testing.T) pyenv {
	t.Helper()
	testutil.Uses("tpurun-cli")
	py := testutil.Need(t, "python3")
	dir, err := pymodule.Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "fnmod.py"), []byte(fnmod), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PYTHONPATH="+dir+string(os.PathListSeparator)+mod, "PYTHONDONTWRITEBYTECODE=1")
	return pyenv{py: py, dir: dir, mod: mod, env: env}
}

func (p pyenv) script(src string, args ...string) *exec.Cmd {
	cmd := exec.Command(p.py, append([]string{"-c", src}, args...)...)
	cmd.Env = slices.Clone(p.env)
	return cmd
}

func (p pyenv) fn(args ...string) *exec.Cmd {
	cmd := exec.Command(p.py, append([]string{"-m", "tpurun.fn"}, args...)...)
	cmd.Env = slices.Clone(p.env)
	return cmd
}

func TestPythonWorkersReport(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, p.script(pyReport)}, {[]int{1, 2}, p.script(pyReport)}, {[]int{3}, goCmd(t, "report")}})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || !doc.OK || len(doc.Results) != 4 {
		t.Fatalf("%v %+v", err, doc)
	}
	for i, res := range doc.Results {
		var v struct {
			Replica, Rank int
			Lang          string
		}
		json.Unmarshal(res.Value, &v)
		wantLang := "py"
		if i == 3 {
			wantLang = "go"
		}
		if v.Replica != i || v.Lang != wantLang || res.Rank != v.Rank {
			t.Fatalf("result %d: %s", i, res.Value)
		}
	}
}

func TestPythonFail(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, p.script(pyFail)}})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || doc.ExitCode != 1 {
		t.Fatalf("%v exit %d", err, doc.ExitCode)
	}
	e := doc.Results[0].Error
	if e == nil || e.Type != "KeyError" || e.Message != "'missing shard'" || !strings.Contains(e.Traceback, "in step") {
		t.Fatalf("error: %+v", e)
	}
}

func TestPythonSeedScenario(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, p.fn("fnmod:square")}, {[]int{0}, p.fn("fnmod:square")}, {[]int{0}, p.fn("fnmod:square")}})
	_, err := c.Finish(exitsOf(runs))
	ce := only(t, err, ErrDuplicateResult)
	if !strings.HasPrefix(ce.Message, "3 results for replica 0: rank") || !strings.Contains(ce.Hint, "SPMD") {
		t.Fatalf("%+v", ce)
	}
}

func TestPythonGrandchildDoesNotInheritChannel(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	run := launch(t, c, 0, 1, []int{0}, p.script(pyGrandchild), func(pid int, ino uint64, out *bufio.Reader) {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the grandchild pid: %v", err)
		}
		gpid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		checkNoChannel(t, gpid, ino)
	})
	doc, err := c.Finish([]RankExit{run.exit})
	if err != nil || !doc.OK || string(doc.Results[0].Value) != `"after the grandchild"` {
		t.Fatalf("%v %+v", err, doc)
	}
}

// pyGrandchildReports is a worker whose child program calls tpurun.report too: the child inherits the worker's
// variables but not its channel (close-on-exec), and the first file it opens takes the channel's number.
const pyGrandchildReports = `
import os, subprocess, sys, tpurun
child = """
import os, sys
log = open(sys.argv[1], "ab")            # takes the lowest free number: the channel's, 3
assert log.fileno() == int(os.environ["TPURUN_RESULT_FD"]), log.fileno()
import tpurun
try:
    tpurun.report(0, "from the child")
    print("child: sent", flush=True)
except tpurun.ChannelError as e:
    print("child: refused: " + str(e), flush=True)
"""
subprocess.run([sys.executable, "-c", child, os.environ["CHILD_LOG"]], check=True)
tpurun.report(tpurun.replicas()[0], "from the worker")
`

// TestPythonChildOfWorkerCannotReport: a program a worker starts, holding some other file at the channel's
// number, is refused by the client (TPURUN_RESULT_ID names another file) and writes nothing into its file; the
// worker's own report arrives.
func TestPythonChildOfWorkerCannotReport(t *testing.T) {
	p := newPy(t)
	log := filepath.Join(t.TempDir(), "child.log")
	cmd := p.script(pyGrandchildReports)
	cmd.Env = append(cmd.Env, "CHILD_LOG="+log)
	c := NewCollector(Options{Required: true})
	run := launch(t, c, 0, 1, []int{0}, cmd, nil)
	doc, err := c.Finish([]RankExit{run.exit})
	if err != nil || !doc.OK || len(doc.Results) != 1 || string(doc.Results[0].Value) != `"from the worker"` {
		t.Fatalf("%v %+v", err, doc)
	}
	if !strings.HasPrefix(run.stdout, "child: refused: TPURUN_RESULT_FD=3: descriptor 3 is a regular file") ||
		!strings.Contains(run.stdout, "not the pipe TPURUN_RESULT_ID=") {
		t.Fatalf("the child said %q", run.stdout)
	}
	if b, err := os.ReadFile(log); err != nil || len(b) != 0 {
		t.Fatalf("the child wrote %d bytes into its own file (%v)", len(b), err)
	}
}

func TestFunctionMode(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	// --args-json, then extra argv strings; rank 1 owns two replicas: one call each, with the global ordinal.
	runs := runWorld(t, c, []spec{
		{[]int{0}, p.fn("--args-json", "[3]", "fnmod:square", "extra")},
		{[]int{1, 2}, p.fn("--args-json", "[3]", "fnmod:square", "extra")},
	})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || !doc.OK {
		t.Fatalf("%v %+v", err, doc)
	}
	for i, res := range doc.Results {
		var v struct {
			Index, Sq int
			Rest      []string
		}
		if err := json.Unmarshal(res.Value, &v); err != nil || v.Index != i || v.Sq != 3*i*i || len(v.Rest) != 1 || v.Rest[0] != "extra" {
			t.Fatalf("replica %d: %s (%v)", i, res.Value, err)
		}
	}
}

func TestFunctionModeArgsFromEnv(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	cmd := p.fn("fnmod:square")
	cmd.Env = append(cmd.Env, "TPURUN_FN_ARGS_JSON=[2]")
	run := launch(t, c, 0, 1, []int{5}, cmd, nil)
	doc, err := c.Finish([]RankExit{run.exit})
	if err != nil || !strings.Contains(string(doc.Results[0].Value), `"sq":50`) {
		t.Fatalf("%v %s", err, doc.Results[0].Value)
	}
}

// TestFunctionModeBadTargets: each unusable target is an error frame of type tpurun.TargetError and exit 2,
// before the function is called (the marker file is never created).
func TestFunctionModeBadTargets(t *testing.T) {
	p := newPy(t)
	cases := []struct{ target, want string }{
		{"nosuchmod:f", "no module named 'nosuchmod'"},
		{"fnmod:nope", "has no attribute 'nope'"},
		{"fnmod:nested", "nested function"},
		{"fnmod:outer.<locals>.inner", "nested function"},
		{"fnmod:lam", "lambda"},
		{"fnmod:not_callable", "not a function"},
		{"fnmod", "want module:function"},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "called")
			c := NewCollector(Options{Required: true})
			cmd := p.fn(tc.target)
			cmd.Env = append(cmd.Env, "MARKER="+marker)
			runs := runWorld(t, c, []spec{{[]int{0, 1}, cmd}})
			if runs[0].exit.ExitCode != 2 {
				t.Fatalf("exit code %d, want 2", runs[0].exit.ExitCode)
			}
			doc, err := c.Finish(exitsOf(runs))
			if err != nil {
				t.Fatalf("a target error is not a contract violation: %v", err)
			}
			if len(doc.Results) != 2 || doc.ExitCode != 2 {
				t.Fatalf("want an error for each owned replica and exit 2: %+v", doc)
			}
			for _, r := range doc.Results {
				if r.OK || r.Error == nil || r.Error.Type != "tpurun.TargetError" || !strings.Contains(r.Error.Message, tc.want) {
					t.Fatalf("replica %d: %+v", r.Replica, r.Error)
				}
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the function was called before the target was rejected (marker: %v)", err)
			}
		})
	}
}

func TestFunctionModeException(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, p.fn("fnmod:square")}, {[]int{1}, p.fn("fnmod:boom")}})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || doc.ExitCode != 1 || runs[1].exit.ExitCode != 1 {
		t.Fatalf("%v, exit %d", err, doc.ExitCode)
	}
	e := doc.Results[1].Error
	if e == nil || e.Type != "ValueError" || e.Message != "replica 1 diverged" ||
		!strings.Contains(e.Traceback, "fnmod.py") || !strings.Contains(e.Traceback, "in boom") {
		t.Fatalf("error: %+v", e)
	}
	if !doc.Results[0].OK {
		t.Fatal("the healthy rank's result is lost")
	}
}

// TestFunctionModePickle: a non-JSON return value is pickled, marked so in the document, and unpickles to the
// same value in Python from the document alone.
func TestFunctionModePickle(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, p.fn("fnmod:point")}, {[]int{1}, p.fn("fnmod:as_set")}})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || !doc.OK {
		t.Fatalf("%v %+v", err, doc)
	}
	for _, r := range doc.Results {
		if r.Encoding != "pickle" || len(r.ValueB64) == 0 || r.Value != nil {
			t.Fatalf("replica %d: %+v", r.Replica, r)
		}
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := WriteFile(path, doc); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.py, "-c", `
import json, sys, tpurun._spawn as s
doc = json.load(open(sys.argv[1]))
assert doc["results"][0]["encoding"] == "pickle"
res = s.decode_results(doc)
print(type(res[0]).__name__, res[0].x, sorted(res[1]))
`, path)
	cmd.Env = slices.Clone(p.env)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "Point 0 [1, 2]" {
		t.Fatalf("unpickling from the document: %v\n%s", err, out)
	}
}

// TestFunctionModeScriptPath: a target given as a file path is loaded as __mp_main__ (its main block does not
// run), which is what spawn() sends for a function defined in the user's __main__ script.
func TestFunctionModeScriptPath(t *testing.T) {
	p := newPy(t)
	script := filepath.Join(t.TempDir(), "train.py")
	src := `
import sys, tpurun
def main(index, lr):
    return {"index": index, "lr": lr, "module": __name__}
if __name__ == "__main__":
    print(tpurun.target_of(main))
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.py, script)
	cmd.Env = slices.Clone(p.env)
	out, err := cmd.Output()
	target := strings.TrimSpace(string(out))
	if err != nil || target != script+":main" {
		t.Fatalf("target_of in __main__: %q, %v", target, err)
	}
	c := NewCollector(Options{Required: true})
	run := launch(t, c, 0, 1, []int{0}, p.fn("--args-json", "[0.5]", target), nil)
	doc, err := c.Finish([]RankExit{run.exit})
	if err != nil || string(doc.Results[0].Value) != `{"index":0,"lr":0.5,"module":"__mp_main__"}` || run.stdout != "" {
		t.Fatalf("%v %s stdout %q", err, doc.Results[0].Value, run.stdout)
	}
}

// TestHugeIntegerResult: a 5000-digit integer result cannot make the results document unloadable by Python's json
// (which refuses integers over 4300 digits): tpurun.report pickles it (it comes back an int), the Go client
// refuses it, and a raw JSON frame holding one is a malformed_frame naming ErrHugeInteger with its own hint. The
// document loads with Python's json.
func TestHugeIntegerResult(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{})
	runs := runWorld(t, c, []spec{{[]int{0}, p.script("import tpurun; tpurun.report(0, 7 ** 6000)")}, {[]int{1}, goCmd(t, "hugeint")}})
	doc, err := c.Finish(exitsOf(runs))
	ce := only(t, err, worker.ErrHugeInteger)
	if !errors.Is(err, ErrMalformedFrame) || ce.Rank != 1 || !strings.Contains(ce.Message, "an integer of 5000 digits at byte 1") ||
		!strings.Contains(ce.Hint, "4300 digits") {
		t.Fatalf("violation %+v", ce)
	}
	if len(doc.Results) != 1 || doc.Results[0].Encoding != "pickle" {
		t.Fatalf("results %+v: want replica 0's integer pickled", doc.Results)
	}
	path := filepath.Join(t.TempDir(), "doc.json")
	if err := WriteFile(path, doc); err != nil {
		t.Fatal(err)
	}
	out, err := p.script(`import json, sys, tpurun
v = tpurun.decode_results(json.load(open(sys.argv[1])))[0]
print(type(v).__name__, v == 7 ** 6000)`, path).Output()
	if err != nil || strings.TrimSpace(string(out)) != "int True" {
		t.Fatalf("loading the document in Python: %v %q", err, out)
	}
}

// TestPythonReportOwnReplica: `tpurun.report(value)` (as `help python` shows it) reports for the worker's one
// replica, and `tpurun.fail(exc)` fails it; a worker that owns several replicas is told to say which, naming them.
func TestPythonReportOwnReplica(t *testing.T) {
	p := newPy(t)
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{
		{[]int{0}, p.script(`import tpurun; tpurun.report({"v": 0})`)},
		{[]int{1}, p.script(`import tpurun; tpurun.report(value=(1, "tuple"))`)},
		{[]int{2}, p.script(`import tpurun; tpurun.fail(KeyError("missing shard"))`)},
		{[]int{3, 4}, p.script(`import tpurun
try:
    tpurun.report("whose?")
except TypeError as e:
    print(e)
for r in tpurun.replicas():
    tpurun.report(r, r)`)},
	})
	doc, _ := c.Finish(exitsOf(runs))
	if len(doc.Results) != 5 || string(doc.Results[0].Value) != `{"v":0}` || doc.Results[1].Encoding != "pickle" ||
		doc.Results[2].Error == nil || doc.Results[2].Error.Type != "KeyError" || string(doc.Results[4].Value) != "4" {
		t.Fatalf("%+v", doc.Results)
	}
	want := "tpurun.report(value): this worker owns replicas 3,4 (TPURUN_REPLICAS), so say which: tpurun.report(replica, value)"
	if !strings.Contains(runs[3].stdout, want) {
		t.Fatalf("two replicas: %q lacks %q", runs[3].stdout, want)
	}
}
