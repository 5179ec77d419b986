package results

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTpurun stands in for the tpurun binary (the end-to-end test with the real binary comes with the CLI): it
// records its argv, prints worker noise (unless $FAKE_QUIET: tpurun --json-frames prints nothing before its
// frames) and then the file $FAKE_DOC (a document, or frames and a document) as the last thing on stdout, and exits
// with $FAKE_RC.
const fakeTpurun = `
import json, os, sys
with open(os.environ["FAKE_ARGV"], "w") as f:
    json.dump({"argv": sys.argv[1:], "python": os.environ.get("TPURUN_CALLER_PYTHON"),
               "function_file": os.environ.get("TPURUN_FN_FUNCTION_FILE")}, f)
if not os.environ.get("FAKE_QUIET"):
    print("worker 0 says {not json")
    print("{\"results\": \"a decoy line that is not the last thing\"}", flush=True)
doc = os.environ.get("FAKE_DOC")
if doc:
    out = sys.stdout.buffer
    if "--json-fd" in sys.argv:  # the document on the caller's pipe, as tpurun --json-fd writes it
        out = os.fdopen(int(sys.argv[sys.argv.index("--json-fd") + 1]), "wb")
    out.write(open(doc, "rb").read())
    out.flush()
sys.exit(int(os.environ.get("FAKE_RC", "0")))
`

// spawnDriver calls tpurun.spawn in the ways a user would and prints one JSON line per case. cloudpickle is made
// unimportable (as Python itself blocks an import: None in sys.modules): functions go by name without it.
const spawnDriver = `
import sys
sys.modules["cloudpickle"] = None
import json, os, warnings, tpurun, fnmod
def case(name, call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = call()
            out = {"ok": True, "results": {str(k): (v if not isinstance(v, fnmod.Point) else "Point(%d)" % v.x)
                                           for k, v in res.items()}}
        except tpurun.SpawnError as e:
            out = {"ok": False, "spawn_error": str(e), "exit_code": e.exit_code, "kept": sorted(e.results),
                   "error": e.error, "messages": e.messages}
        except (ValueError, TypeError) as e:
            out = {"ok": False, "early": type(e).__name__ + ": " + str(e)}
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    print(json.dumps({"case": name, **out}), flush=True)
mode = sys.argv[1]
fake = os.environ["FAKE"]
if mode == "fn":
    case(mode, lambda: tpurun.spawn(fnmod.square, args=(3,), nprocs=2, start_method="forkserver", tpurun=fake))
elif mode == "positional":  # xmp.spawn's order: fn, args, nprocs, join, daemon, start_method
    case(mode, lambda: tpurun.spawn(fnmod.square, (5,), 2, "spawn", tpurun=fake))
elif mode == "positional6":
    case(mode, lambda: tpurun.spawn(fnmod.square, (5,), 2, True, False, "spawn", tpurun=fake))
elif mode == "noop-options":
    case(mode, lambda: tpurun.spawn(fnmod.square, (5,), 2, False, True, "fork", tpurun=fake))
elif mode == "unknown":
    case(mode, lambda: tpurun.spawn(fnmod.square, nproc=8, tpurun=fake))
elif mode == "unknown2":
    case(mode, lambda: tpurun.spawn(fnmod.square, timout=3, bogus=1, tpurun=fake))
elif mode == "start":
    case(mode, lambda: tpurun.spawn(fnmod.square, start_method="threads", tpurun=fake))
elif mode == "lambda":
    case(mode, lambda: tpurun.spawn(lambda i: i, nprocs=2, tpurun=fake))
elif mode == "nested":
    case(mode, lambda: tpurun.spawn(fnmod.nested, tpurun=fake))
elif mode == "badargs":  # neither JSON nor picklable
    case(mode, lambda: tpurun.spawn(fnmod.square, args=(1, lambda: 0), tpurun=fake))
elif mode == "bigint":  # more digits than Python's json reads: pickled, not a raw ValueError
    case(mode, lambda: tpurun.spawn(fnmod.square, args=(10 ** 5000,), nprocs=2, tpurun=fake))
elif mode == "badnprocs":
    case(mode, lambda: tpurun.spawn(fnmod.square, nprocs="2", tpurun=fake))
else:
    case(mode, lambda: tpurun.spawn("fnmod:square", tpurun=fake))
`

func TestSpawn(t *testing.T) {
	p := newPy(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "tpurun")
	if err := os.WriteFile(fake, []byte("#!"+p.py+"\n"+fakeTpurun), 0o755); err != nil {
		t.Fatal(err)
	}
	// Real documents, produced by the collector from real Python function-mode workers.
	docs := map[string]*Document{}
	docOf := func(name string, specs []spec, required bool) string {
		c := NewCollector(Options{Required: required, RunID: name})
		runs := runWorld(t, c, specs)
		doc, _ := c.Finish(exitsOf(runs))
		path := filepath.Join(dir, name+".json")
		if err := WriteFile(path, doc); err != nil {
			t.Fatal(err)
		}
		docs[name] = doc
		return path
	}
	okDoc := docOf("ok", []spec{{[]int{0}, p.fn("--args-json", "[3]", "fnmod:square")}, {[]int{1}, p.fn("fnmod:point")}}, true)
	// What tpurun --json-frames prints for the ok document: replica 1's Point as a frame before the document; with
	// its pickle cut short; and the document without the frames before it.
	framedOf := func(name string, edit func(pickle []byte) []byte, cut bool) string {
		doc := *docs["ok"]
		doc.Results = slices.Clone(doc.Results)
		var b bytes.Buffer
		for i := range doc.Results {
			if r := &doc.Results[i]; r.Encoding == "pickle" && edit != nil {
				r.ValueB64 = edit(r.ValueB64)
			}
		}
		if err := doc.EncodeFramed(&b); err != nil {
			t.Fatal(err)
		}
		out := b.Bytes()
		if cut {
			out = out[bytes.LastIndexByte(out[:len(out)-1], '\n')+1:]
		}
		path := filepath.Join(dir, name+".framed")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	okFramed := framedOf("ok", nil, false)
	shortFramed := framedOf("short", func(p []byte) []byte { return p[:len(p)-1] }, false) // no STOP opcode
	noFrames := framedOf("noframes", nil, true)
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
		Messages   []string
		Warnings   []string
	}
	run := func(mode, doc, rc string, env ...string) (outcome, map[string]any) {
		t.Helper()
		argvFile := filepath.Join(t.TempDir(), "argv.json")
		cmd := exec.Command(p.py, "-c", spawnDriver, mode)
		cmd.Env = append(slices.Clone(p.env), "FAKE="+fake, "FAKE_ARGV="+argvFile, "FAKE_DOC="+doc, "FAKE_RC="+rc)
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: driver failed: %v\n%s", mode, err, out)
		}
		// the driver's line is its last: what the fake's workers printed on stdout comes before it (spawn forwards
		// tpurun's stdout to sys.stdout, the document coming on a pipe of its own)
		lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
		var o outcome
		if err := json.Unmarshal(lines[len(lines)-1], &o); err != nil {
			t.Fatalf("%s: %v: %s", mode, err, out)
		}
		if wantNoise := os.Getenv("FAKE_QUIET") == "" && !slices.Contains(env, "FAKE_QUIET=1"); wantNoise && mode == "fn" &&
			!bytes.Contains(out, []byte("worker 0 says {not json\n")) {
			t.Fatalf("%s: the fake's stdout did not reach the caller's stdout:\n%s", mode, out)
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
		got := withoutJSONFD(anyStrings(argv["argv"]))
		if got != "--json-frames --exit-with-parent --quiet --nprocs 2 --fn fnmod:square --fn-args-json [3]" {
			t.Fatalf("spawn ran tpurun %s", got)
		}
		if py, _ := argv["python"].(string); !filepath.IsAbs(py) {
			t.Fatalf("spawn passed TPURUN_CALLER_PYTHON=%q, want its sys.executable (the workers' interpreter)", py)
		}
		if ff := argv["function_file"]; ff != nil {
			t.Fatalf("a function importable by name was sent by value too (TPURUN_FN_FUNCTION_FILE=%v)", ff)
		}
		if len(o.Warnings) != 0 {
			t.Fatalf("start_method='forkserver' warned: %q", o.Warnings)
		}
	})
	// --json-frames: a pickled value comes as a frame before the document, unpickled from the pipe; one that does not
	// unpickle, or never came, is a SpawnError naming its replica.
	t.Run("framed results", func(t *testing.T) {
		o, _ := run("fn", okFramed, "0", "FAKE_QUIET=1")
		if r0, _ := o.Results["0"].(map[string]any); !o.OK || len(o.Results) != 2 || o.Results["1"] != "Point(1)" || r0["sq"] != float64(0) {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("a framed pickle cut short", func(t *testing.T) {
		o, _ := run("fn", shortFramed, "0", "FAKE_QUIET=1")
		if o.OK || !strings.HasPrefix(o.SpawnError, "the result of replica 1 (rank 1, pid ") || !strings.Contains(o.SpawnError, "cannot be unpickled in this process") {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("no frame for a framed result", func(t *testing.T) {
		o, _ := run("fn", noFrames, "0", "FAKE_QUIET=1")
		if o.OK || !strings.HasPrefix(o.SpawnError, "the result of replica 1 (rank 1, pid ") ||
			!strings.HasSuffix(o.SpawnError, "was lost on its way from tpurun: tpurun's output carried no frame for it") {
			t.Fatalf("%+v", o)
		}
	})
	// xmp.spawn(fn, args, nprocs, join, daemon, start_method), positionally: the 4th is join, not a tpurun path.
	for _, mode := range []string{"positional", "positional6"} {
		t.Run(mode, func(t *testing.T) {
			o, argv := run(mode, okDoc, "0")
			got := withoutJSONFD(anyStrings(argv["argv"]))
			if !o.OK || got != "--json-frames --exit-with-parent --quiet --nprocs 2 --fn fnmod:square --fn-args-json [5]" || len(o.Warnings) != 0 {
				t.Fatalf("%+v; tpurun ran with %s", o, got)
			}
		})
	}
	t.Run("an integer too long for JSON is pickled", func(t *testing.T) {
		o, argv := run("bigint", okDoc, "0")
		got := withoutJSONFD(anyStrings(argv["argv"]))
		if !o.OK || got != "--json-frames --exit-with-parent --quiet --nprocs 2 --fn fnmod:square" {
			t.Fatalf("%+v; tpurun ran with %s", o, got)
		}
	})
	t.Run("join and daemon have no effect and say so; fork preloads", func(t *testing.T) {
		o, argv := run("noop-options", okDoc, "0")
		w := strings.Join(o.Warnings, "\n")
		got := withoutJSONFD(anyStrings(argv["argv"]))
		if !o.OK || argv == nil || len(o.Warnings) != 2 || !strings.Contains(w, "join=False has no effect") ||
			!strings.Contains(w, "daemon=True has no effect") || !strings.Contains(got, "--preload fnmod --fn fnmod:square") {
			t.Fatalf("%+v; tpurun ran with %s", o, got)
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
		o, _ := run("str", "", "3")
		if o.OK || o.ExitCode != 3 || !strings.Contains(o.SpawnError, "printed no results document") ||
			!strings.Contains(o.SpawnError, "its stderr says why") {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("exit 2 without a document", func(t *testing.T) {
		o, _ := run("str", "", "2")
		if o.OK || o.ExitCode != 2 || !strings.Contains(o.SpawnError, "usage or configuration error") {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("ok document but failing exit", func(t *testing.T) {
		o, _ := run("str", okDoc, "7")
		if o.OK || o.ExitCode != 7 {
			t.Fatalf("a non-zero exit must raise even with an ok document: %+v", o)
		}
	})
	for _, tc := range []struct{ mode, want string }{
		{"lambda", "ValueError: spawn(fn): __main__.<lambda>.<locals>.<lambda> is a lambda, which the workers cannot import by name. " +
			"tpurun.spawn sends such a function by value with cloudpickle, which is not importable here: `pip install cloudpickle`"},
		{"nested", "ValueError: spawn(fn): fnmod.outer.<locals>.inner is a nested function, which the workers cannot import by name. "},
		{"badargs", "TypeError: spawn: args[1] (a function) can be neither passed as JSON nor pickled"},
		{"unknown", "TypeError: spawn() got unexpected keyword argument 'nproc' (did you mean 'nprocs'?)"},
		{"unknown2", "TypeError: spawn() got unexpected keyword arguments 'bogus', 'timout' (did you mean 'timeout'?)"},
		{"start", "ValueError: spawn: start_method='threads'"},
		{"badnprocs", "TypeError: spawn: nprocs must be an int or None, got str"},
	} {
		t.Run(tc.mode+" refused before running", func(t *testing.T) {
			o, argv := run(tc.mode, okDoc, "0")
			if o.OK || !strings.HasPrefix(o.Early, tc.want) || argv != nil {
				t.Fatalf("%+v (tpurun ran: %v); want an early %q", o, argv != nil, tc.want)
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
