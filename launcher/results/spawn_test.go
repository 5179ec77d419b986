package results

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTpurun stands in for the tpurun binary (the end-to-end test with the real binary comes with the CLI): it
// records its argv, prints worker noise and then the document in $FAKE_DOC as the last thing on stdout, and exits
// with $FAKE_RC.
const fakeTpurun = `
import json, os, sys
with open(os.environ["FAKE_ARGV"], "w") as f:
    json.dump({"argv": sys.argv[1:], "python": os.environ.get("PYTHON_EXEC")}, f)
print("worker 0 says {not json")
print("{\"results\": \"a decoy line that is not the last thing\"}")
doc = os.environ.get("FAKE_DOC")
if doc:
    sys.stdout.write(open(doc).read())
sys.exit(int(os.environ.get("FAKE_RC", "0")))
`

// spawnDriver calls tpurun.spawn in the ways a user would and prints one JSON line per case.
const spawnDriver = `
import json, os, sys, tpurun, fnmod
def case(name, fn, **kw):
    try:
        res = tpurun.spawn(fn, tpurun=os.environ["FAKE"], **kw)
        out = {"ok": True, "results": {str(k): (v if not isinstance(v, fnmod.Point) else "Point(%d)" % v.x)
                                       for k, v in res.items()}}
    except tpurun.SpawnError as e:
        out = {"ok": False, "spawn_error": str(e), "exit_code": e.exit_code, "kept": sorted(e.results),
               "error": e.error}
    except (ValueError, TypeError) as e:
        out = {"ok": False, "early": type(e).__name__ + ": " + str(e)}
    print(json.dumps({"case": name, **out}), flush=True)
mode = sys.argv[1]
if mode == "fn":
    case(mode, fnmod.square, args=(3,), nprocs=2, start_method="fork")
elif mode == "lambda":
    case(mode, lambda i: i, nprocs=2)
elif mode == "nested":
    case(mode, fnmod.nested)
elif mode == "badargs":
    case(mode, fnmod.square, args=(object(),))
else:
    case(mode, "fnmod:square")
`

func TestSpawn(t *testing.T) {
	p := newPy(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "tpurun")
	if err := os.WriteFile(fake, []byte("#!"+p.py+"\n"+fakeTpurun), 0o755); err != nil {
		t.Fatal(err)
	}
	// Real documents, produced by the collector from real Python function-mode workers.
	docOf := func(name string, specs []spec, required bool) string {
		c := NewCollector(Options{Required: required, RunID: name})
		runs := runWorld(t, c, specs)
		doc, _ := c.Finish(exitsOf(runs))
		path := filepath.Join(dir, name+".json")
		if err := WriteFile(path, doc); err != nil {
			t.Fatal(err)
		}
		return path
	}
	okDoc := docOf("ok", []spec{{[]int{0}, p.fn("--args-json", "[3]", "fnmod:square")}, {[]int{1}, p.fn("fnmod:point")}}, true)
	boomDoc := docOf("boom", []spec{{[]int{0}, p.fn("fnmod:square")}, {[]int{1}, p.fn("fnmod:boom")}}, true)
	dupDoc := docOf("dup", []spec{{[]int{0}, p.fn("fnmod:square")}, {[]int{0}, p.fn("fnmod:square")}}, true)

	type outcome struct {
		Case       string
		OK         bool
		Results    map[string]any
		SpawnError string `json:"spawn_error"`
		ExitCode   int    `json:"exit_code"`
		Kept       []int
		Early      string
		Error      map[string]string
	}
	run := func(mode, doc, rc string) (outcome, map[string]any) {
		t.Helper()
		argvFile := filepath.Join(t.TempDir(), "argv.json")
		cmd := exec.Command(p.py, "-c", spawnDriver, mode)
		cmd.Env = append(slices.Clone(p.env), "FAKE="+fake, "FAKE_ARGV="+argvFile, "FAKE_DOC="+doc, "FAKE_RC="+rc)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: driver failed: %v\n%s", mode, err, out)
		}
		var o outcome
		if err := json.Unmarshal(out, &o); err != nil {
			t.Fatalf("%s: %v: %s", mode, err, out)
		}
		var argv map[string]any
		if b, err := os.ReadFile(argvFile); err == nil {
			json.Unmarshal(b, &argv)
		}
		return o, argv
	}

	t.Run("results", func(t *testing.T) {
		o, argv := run("fn", okDoc, "0")
		if !o.OK || len(o.Results) != 2 || o.Results["1"] != "Point(1)" {
			t.Fatalf("%+v", o)
		}
		if r0, _ := o.Results["0"].(map[string]any); r0["sq"] != float64(0) || r0["index"] != float64(0) {
			t.Fatalf("replica 0: %+v", o.Results["0"])
		}
		got := strings.Join(anyStrings(argv["argv"]), " ")
		if got != "--json --nprocs 2 --fn fnmod:square --fn-args-json [3]" {
			t.Fatalf("spawn ran tpurun %s", got)
		}
		if py, _ := argv["python"].(string); py == "" {
			t.Fatal("spawn did not pass PYTHON_EXEC (the interpreter the workers should use)")
		}
	})
	t.Run("exception is the root cause", func(t *testing.T) {
		o, _ := run("str", boomDoc, "1")
		if o.OK || o.ExitCode != 1 || !strings.HasPrefix(o.SpawnError, "replica 1 (rank 1, pid ") ||
			!strings.Contains(o.SpawnError, "raised ValueError: replica 1 diverged") || !strings.Contains(o.SpawnError, "in boom") ||
			len(o.Kept) != 1 || o.Error["type"] != "ValueError" {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("violation is the root cause", func(t *testing.T) {
		o, _ := run("str", dupDoc, "65")
		if o.OK || o.ExitCode != 65 || !strings.HasPrefix(o.SpawnError, "duplicate_result: 2 results for replica 0") ||
			!strings.Contains(o.SpawnError, "hint: ") {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("no document", func(t *testing.T) {
		o, _ := run("str", "", "2")
		if o.OK || o.ExitCode != 2 || !strings.Contains(o.SpawnError, "printed no results document") {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("ok document but failing exit", func(t *testing.T) {
		o, _ := run("str", okDoc, "7")
		if o.OK || o.ExitCode != 7 {
			t.Fatalf("a non-zero exit must raise even with an ok document: %+v", o)
		}
	})
	for _, mode := range []string{"lambda", "nested", "badargs"} {
		t.Run(mode+" refused before running", func(t *testing.T) {
			o, argv := run(mode, okDoc, "0")
			if o.OK || o.Early == "" || argv != nil {
				t.Fatalf("%+v (tpurun ran: %v)", o, argv != nil)
			}
		})
	}
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}
