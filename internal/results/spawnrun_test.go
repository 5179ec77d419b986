package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/testutil"
)

// The tests of this file run the Python spawn() and run() against fakeCLI: the test binary standing in for the
// tpurun binary, with real function-mode workers and the real Collector.

// trainScript is a user's script, run as __main__: its arguments (an argparse Namespace, a namedtuple and a
// class defined in the script, a tuple, an int-keyed dict) are pickled to the workers and its results (objects
// of classes defined in the script, a tuple, an int-keyed dict) pickled back.
const trainScript = `
import argparse, collections, json, os, sys, warnings
import tpurun

Pair = collections.namedtuple("Pair", "a b")

class Config:
    def __init__(self, depth):
        self.depth = depth

class Result:
    def __init__(self, index, lr, pair, t, depth):
        self.index, self.lr, self.pair, self.t, self.depth = index, lr, pair, t, depth
        self.pid = os.getpid()
        self.leaked = [k for k in ("TPURUN_FN_ARGS_FILE", "TPURUN_FN_MAIN") if k in os.environ]

def _mp_fn(index, flags, pair, t, keys, cfg):
    assert type(flags) is argparse.Namespace, type(flags)
    assert type(pair) is Pair and type(pair).__module__ == "__mp_main__", (type(pair), type(pair).__module__)
    assert type(t) is tuple and type(keys) is dict and list(keys) == [0], (t, keys)
    assert __name__ == "__mp_main__" and sys.modules["__main__"] is sys.modules["__mp_main__"]
    return Result(index, flags.lr, pair, t, cfg.depth), (index, "a tuple"), {index: "an int key"}

if __name__ == "__main__":
    flags = argparse.Namespace(lr=0.5, name="run")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults warn about nothing
        res = tpurun.spawn(_mp_fn, (flags, Pair(1, (2, 3)), (4, 5), {0: "zero"}, Config(7)), 2)
    out = {}
    for i, (r, t, d) in sorted(res.items()):
        out[str(i)] = {"result_class": type(r) is Result, "index": r.index, "lr": r.lr, "depth": r.depth,
                       "pair": type(r.pair) is Pair and r.pair == Pair(1, (2, 3)),
                       "t": type(r.t) is tuple and r.t == (4, 5), "tuple": type(t) is tuple and t == (i, "a tuple"),
                       "intkey": d == {i: "an int key"}, "other_process": r.pid != os.getpid(), "leaked": r.leaked}
    print(json.dumps(out))
`

// cliEnv is the environment for a Python program whose spawn() runs fakeCLI as tpurun.
func cliEnv(t *testing.T, p pyenv, extra ...string) []string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append(append(slices.Clone(p.env), testutil.Self("tpurun-cli"), "TPURUN="+self), extra...)
}

// runDriver runs the Python program argv in dir with env and returns its stdout and stderr; a non-zero exit fails.
func runDriver(t *testing.T, dir string, env []string, argv ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", argv, err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func readRecord(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("tpurun never ran: %v", err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestSpawnPicklesBothWays: spawn() from a script run as __main__ passes an argparse Namespace, a tuple, an
// int-keyed dict and objects of the script's own classes to the workers as they were, and gets the workers'
// objects of the script's classes back as the script's classes (the workers import the script as __mp_main__;
// the parent maps it to __main__). The pickled arguments travel in a private file, removed when spawn returns,
// and neither variable reaches what the function starts.
func TestSpawnPicklesBothWays(t *testing.T) {
	p := newPy(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(trainScript), 0o644); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "argv.json")
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p, "FAKE_ARGV="+record), p.py, script)
	var got map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 2 {
		t.Fatalf("results %v", got)
	}
	for i, r := range got {
		for _, k := range []string{"result_class", "pair", "t", "tuple", "intkey", "other_process"} {
			if r[k] != true {
				t.Errorf("replica %s: %s is %v: %v", i, k, r[k], r)
			}
		}
		if fmt.Sprint(r["index"]) != i || r["lr"] != 0.5 || r["depth"] != float64(7) {
			t.Errorf("replica %s: %v", i, r)
		}
		if l, _ := r["leaked"].([]any); len(l) != 0 {
			t.Errorf("replica %s: the function saw %v", i, l)
		}
	}
	rec := readRecord(t, record)
	argv := withoutJSONFD(anyStrings(rec["argv"]))
	if argv != "--json-frames --exit-with-parent --quiet --nprocs 2 --fn "+script+":_mp_fn" {
		t.Errorf("tpurun ran with %s; want no --fn-args-json (the arguments are pickled)", argv)
	}
	if rec["TPURUN_FN_MAIN"] != script {
		t.Errorf("TPURUN_FN_MAIN=%v, want the script %s", rec["TPURUN_FN_MAIN"], script)
	}
	file, _ := rec["TPURUN_FN_ARGS_FILE"].(string)
	if n, _ := rec["args_file_bytes"].(float64); file == "" || n == 0 {
		t.Fatalf("no pickled arguments were passed: %v", rec)
	}
	if _, err := os.Stat(filepath.Dir(file)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the arguments' directory %s outlived spawn(): %v", filepath.Dir(file), err)
	}
}

// TestSpawnFromModuleMain: a caller run as `python -m pkg.train` gets its module imported as __mp_main__ in the
// workers (TPURUN_FN_MAIN names the module), so its classes come back as the caller's __main__ classes; a class
// the parent does not have fails to decode with a SpawnError naming the replica.
func TestSpawnFromModuleMain(t *testing.T) {
	p := newPy(t)
	dir := t.TempDir()
	pkg := filepath.Join(dir, "mainpkg")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `
import json, os, sys, tpurun
class Box:
    def __init__(self, v):
        self.v = v
if __name__ == "__mp_main__":
    class WorkerOnly:   # what only the workers define: the parent cannot unpickle it
        pass
def fn(index, box):
    return Box((index, box.v))
def only(index):
    return WorkerOnly()
if __name__ == "__main__":
    res = tpurun.spawn(fn, (Box("x"),), 2)
    out = {"boxes": {str(k): type(v) is Box and v.v == (k, "x") for k, v in res.items()}}
    try:
        tpurun.spawn(only, nprocs=1)
        out["only"] = "no error"
    except tpurun.SpawnError as e:
        out["only"] = str(e)
    print(json.dumps(out))
`
	for name, body := range map[string]string{"__init__.py": "", "train.py": src} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	record := filepath.Join(t.TempDir(), "argv.json")
	out, _ := runDriver(t, dir, cliEnv(t, p, "FAKE_ARGV="+record), p.py, "-m", "mainpkg.train")
	var got struct {
		Boxes map[string]bool
		Only  string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Boxes) != 2 || !got.Boxes["0"] || !got.Boxes["1"] {
		t.Fatalf("boxes: %v", got.Boxes)
	}
	if !strings.HasPrefix(got.Only, "the result of replica 0 (rank 0, pid ") || !strings.Contains(got.Only, "cannot be unpickled in this process") ||
		!strings.Contains(got.Only, "WorkerOnly") {
		t.Fatalf("an undecodable result: %q", got.Only)
	}
	if rec := readRecord(t, record); rec["TPURUN_FN_MAIN"] != "mainpkg.train" {
		t.Fatalf("TPURUN_FN_MAIN=%v, want mainpkg.train", rec["TPURUN_FN_MAIN"])
	}
}

// TestSpawnPositionalXmpCall: spawn(fn, (5,), 2, "spawn") as written for xmp.spawn runs, with real workers.
func TestSpawnPositionalXmpCall(t *testing.T) {
	p := newPy(t)
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p), p.py, "-c", `
import json, tpurun, fnmod
res = tpurun.spawn(fnmod.square, (5,), 2, "spawn")
print(json.dumps({str(k): v["sq"] for k, v in res.items()}))
`)
	if strings.TrimSpace(out) != `{"0": 0, "1": 5}` {
		t.Fatalf("got %s", out)
	}
}

// TestSpawnLargeArgs: JSON arguments too long for a command line (Linux refuses one argument of 128 KiB) travel
// in the pickled-arguments file instead, and arrive whole.
func TestSpawnLargeArgs(t *testing.T) {
	p := newPy(t)
	record := filepath.Join(t.TempDir(), "argv.json")
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p, "FAKE_ARGV="+record), p.py, "-c", `
import json, tpurun, fnmod
res = tpurun.spawn(fnmod.square, (2, "x" * 300000), 1)
print(json.dumps({"sq": res[0]["sq"], "rest": [len(r) for r in res[0]["rest"]]}))
`)
	if strings.TrimSpace(out) != `{"sq": 0, "rest": [300000]}` {
		t.Fatalf("got %s", out)
	}
	rec := readRecord(t, record)
	if argv := withoutJSONFD(anyStrings(rec["argv"])); argv != "--json-frames --exit-with-parent --quiet --nprocs 1 --fn fnmod:square" {
		t.Fatalf("tpurun ran with %.200s", argv)
	}
	if n, _ := rec["args_file_bytes"].(float64); n < 300000 {
		t.Fatalf("the arguments' file holds %v bytes", rec["args_file_bytes"])
	}
}

// TestSpawnAtImportTime: spawn() called at a module's top level (its import holds the module's import lock)
// returning objects of that module's class: the values come back, as through the document, instead of the thread
// that unpickles frames waiting for that lock while the import waits for tpurun (seen: "printed no results
// document" after the drain, or a hang once the frames outgrow the pipe).
func TestSpawnAtImportTime(t *testing.T) {
	p := newPy(t)
	if err := os.WriteFile(filepath.Join(p.mod, "impmod.py"), []byte(`
import os, tpurun
class Point:
    def __init__(self, x):
        self.x = x
def f(index):
    return Point(index * 10)
if "TPURUN_RESULT_FD" not in os.environ:  # the caller, not a worker importing this module for f
    RESULT = sorted((k, type(v) is Point, v.x) for k, v in tpurun.spawn(f, nprocs=2).items())
`), 0o644); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "argv.json")
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p, "FAKE_ARGV="+record), p.py, "-c", "import impmod; print(impmod.RESULT)")
	if strings.TrimSpace(out) != "[(0, True, 0), (1, True, 10)]" {
		t.Fatalf("got %s", out)
	}
	rec := readRecord(t, record)
	if argv := withoutJSONFD(anyStrings(rec["argv"])); argv != "--json --exit-with-parent --quiet --nprocs 2 --fn impmod:f --fn-args-json []" {
		t.Fatalf("tpurun ran with %.200s; want --json: the values decoded once the import's thread has them", argv)
	}
}

// TestSpawnUnguardedMain: a script that calls spawn() at import time (no `if __name__ == "__main__":`) would
// start the run again in every worker that imports it; there the call raises, and the caller's SpawnError says
// how to fix the script.
func TestSpawnUnguardedMain(t *testing.T) {
	p := newPy(t)
	script := filepath.Join(t.TempDir(), "unguarded.py")
	src := `
import json, tpurun, fnmod
try:
    res = tpurun.spawn(fnmod.square, nprocs=1)
    print(json.dumps({"error": None}))
except tpurun.SpawnError as e:
    print(json.dumps({"error": str(e)}))
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p), p.py, script)
	var got struct{ Error *string }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(deref(got.Error), "raised tpurun.TargetError: importing the caller's main script "+script+
		" raised RuntimeError: tpurun.spawn() was called while a worker imported the caller's main module") ||
		!strings.Contains(deref(got.Error), `Guard its entry point with`) {
		t.Fatalf("%s", deref(got.Error))
	}
}

// TestSpawnConfigErrorReason: when tpurun refuses the run (exit 2, nothing started), the SpawnError carries the
// reason tpurun printed, while the rest of its stderr still streams through to the caller's stderr.
func TestSpawnConfigErrorReason(t *testing.T) {
	p := newPy(t)
	reason := "--nprocs 3 is not a valid split of the 8 v5e chips on this host (from sysfs); use 1, 2, 4 or 8, or leave it unset"
	out, stderr := runDriver(t, t.TempDir(), cliEnv(t, p, "FAKE_CONFIG_ERROR="+reason), p.py, "-c", `
import json, tpurun, fnmod
try:
    tpurun.spawn(fnmod.square, nprocs=3)
    print(json.dumps({"error": None}))
except tpurun.SpawnError as e:
    print(json.dumps({"error": str(e), "exit_code": e.exit_code, "messages": e.messages, "document": e.document}))
`)
	var got struct {
		Error    *string
		ExitCode int `json:"exit_code"`
		Messages []string
		Document any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Error == nil || got.ExitCode != 2 || got.Document != nil || !strings.Contains(*got.Error, "configuration error") ||
		!strings.HasSuffix(*got.Error, ": tpurun: "+reason) || len(got.Messages) != 1 || got.Messages[0] != "tpurun: "+reason {
		t.Fatalf("%+v", got)
	}
	if !strings.Contains(stderr, "noise from the environment before the reason\ntpurun: "+reason+"\nRun 'tpurun --help'") {
		t.Fatalf("tpurun's stderr was not passed on to the caller's:\n%s", stderr)
	}
}

// survivors lists the live (not zombie) processes whose environment holds tag.
func survivors(t *testing.T, tag string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("\x00"+tag+"\x00")) && !bytes.HasPrefix(env, []byte(tag+"\x00")) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// noSurvivors waits until no process carries tag.
func noSurvivors(t *testing.T, tag string) {
	t.Helper()
	testutil.WaitFor(t, "no process of the run left", func() error {
		if left := survivors(t, tag); len(left) > 0 {
			return fmt.Errorf("processes of the run outlived it: pids %v", left)
		}
		return nil
	})
}

// TestRunTimeout: past run()'s timeout, tpurun gets SIGTERM and, when it does not stop within the grace period,
// SIGKILL; SpawnTimeout names the timeout and how tpurun ended, and no process of the run is left.
func TestRunTimeout(t *testing.T) {
	p := newPy(t)
	for _, tc := range []struct {
		name   string
		env    []string
		want   string
		killed bool
	}{
		{"tpurun stops on SIGTERM", nil, "it stopped on SIGTERM and exited with code 143", false},
		{"tpurun ignores SIGTERM", []string{"FAKE_IGNORE_TERM=1"}, "it did not exit within grace=0.5s of SIGTERM, so it was killed with SIGKILL", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			markers := t.TempDir()
			tag := "TPURUN_TEST_RUN_TAG=" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(markers)
			env := cliEnv(t, p, append([]string{"MARKER_DIR=" + markers, tag}, tc.env...)...)
			out, _ := runDriver(t, t.TempDir(), env, p.py, "-c", `
import json, tpurun, fnmod
try:
    tpurun.spawn(fnmod.sleepy, nprocs=2, timeout=4, grace=0.5)
    print(json.dumps({"error": None}))
except tpurun.SpawnTimeout as e:
    print(json.dumps({"error": str(e), "timeout": e.timeout, "killed": e.killed, "exit_code": e.exit_code,
                      "document": e.document is not None}))
`)
			var got struct {
				Error    *string
				Timeout  float64
				Killed   bool
				ExitCode int `json:"exit_code"`
				Document bool
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.Error == nil || !strings.Contains(*got.Error, "ran past timeout=4s and was stopped: "+tc.want) ||
				got.Timeout != 4 || got.Killed != tc.killed || got.Document == tc.killed {
				t.Fatalf("%+v (%s)", got, deref(got.Error))
			}
			if ms, _ := os.ReadDir(markers); len(ms) != 2 {
				t.Fatalf("%d of 2 workers had started before the timeout; the survivor check would prove nothing", len(ms))
			}
			noSurvivors(t, tag)
		})
	}
}

// TestRunInterrupted: a KeyboardInterrupt while run() waits stops tpurun before it propagates; nothing is left.
func TestRunInterrupted(t *testing.T) {
	p := newPy(t)
	markers := t.TempDir()
	tag := "TPURUN_TEST_RUN_TAG=" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(markers)
	out, _ := runDriver(t, t.TempDir(), cliEnv(t, p, "MARKER_DIR="+markers, tag, "FAKE_IGNORE_TERM=1"), p.py, "-c", `
import json, os, signal, threading, time, tpurun, fnmod
def interrupt():
    while len(os.listdir(os.environ["MARKER_DIR"])) < 2:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt, daemon=True).start()
start = time.monotonic()
try:
    tpurun.spawn(fnmod.sleepy, nprocs=2, grace=0.5)
    print(json.dumps({"raised": None}))
except KeyboardInterrupt:
    print(json.dumps({"raised": "KeyboardInterrupt", "seconds": time.monotonic() - start}))
`)
	var got struct {
		Raised  *string
		Seconds float64
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Raised == nil || *got.Raised != "KeyboardInterrupt" || got.Seconds > 60 {
		t.Fatalf("%+v", got)
	}
	noSurvivors(t, tag)
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// withoutJSONFD is tpurun's argv as spawn passed it, joined by spaces, without --json-fd and its descriptor (a
// number the caller's process chose): spawn passes it unless stderr= is given, and the document comes on that pipe.
func withoutJSONFD(argv []string) string {
	var kept []string
	for i := 0; i < len(argv); i++ {
		if argv[i] == "--json-fd" && i+1 < len(argv) {
			i++
			continue
		}
		kept = append(kept, argv[i])
	}
	return strings.Join(kept, " ")
}
