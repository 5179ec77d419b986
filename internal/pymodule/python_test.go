package pymodule

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/worker"
)

// pythonModule installs the embedded module and returns python3 and the PYTHONPATH to run it with.
func pythonModule(t *testing.T) (py, path string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python module tests: %v", err)
	}
	dir, err := Path(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	return py, dir
}

// runPython runs script with the module on PYTHONPATH, stdin as its input, and returns its stdout.
func runPython(t *testing.T, script string, stdin []byte) []byte {
	t.Helper()
	py, dir := pythonModule(t)
	cmd := exec.Command(py, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "TPURUN_RESULT_FD=", "TPURUN_REPLICAS=")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// pyValues are return values as function mode sees them; the Python side defines VALUES and ENCODINGS.
const pyValues = `
import enum, math
class Color(enum.IntEnum):
    RED = 1
VALUES = [
    (1, 2),                                   # a tuple would come back from JSON as a list
    {0: "a"},                                 # an int key would come back as "0"
    {"a": (1,), "b": [1, {2: 3}]},            # the same, nested
    {1.5: "f", None: 1},
    Color.RED,                                # an IntEnum would come back as an int
    float("nan"),
    {"x": [1, 2.5, None, True, "s", -0.0, 10**30], "y": {"z": []}},
    [],
    "plain",
    # Large bytes-like objects, which the pickler passes apart from its frames and the client sends from their own
    # memory (os.writev of the pieces): alone, nested among copied pieces, and one byte short of a frame's size.
    b"\x00\x01" * (1 << 19),
    [bytearray(range(256)) * 1024, "s" * 70000, (b"b" * 100000, 7), b"c" * 65535],
]
ENCODINGS = ["pickle", "pickle", "pickle", "pickle", "pickle", "pickle", "json", "json", "json", "pickle", "pickle"]

def same(a, b):
    """Equal with the same types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(k, j) and same(a[k], b[j]) for k, j in zip(a, b))
    return a == b
`

// TestPythonValuesRoundTrip: what a Python function returns comes back equal, with the same types, through
// report (the Python client), the Go decoder, the results document and tpurun.decode_results: values that JSON
// would change (a tuple, an int-keyed dict) are pickled.
func TestPythonValuesRoundTrip(t *testing.T) {
	stream := runPython(t, pyValues+`
import sys, tpurun._wire as w
ch = w.Channel(sys.stdout.fileno(), None)
for i, v in enumerate(VALUES):
    ch.report(i, v)
`, nil)
	type result struct {
		Replica  int             `json:"replica"`
		OK       bool            `json:"ok"`
		Encoding string          `json:"encoding"`
		Value    json.RawMessage `json:"value,omitempty"`
		ValueB64 []byte          `json:"value_b64,omitempty"`
	}
	doc := struct {
		OK      bool     `json:"ok"`
		Results []result `json:"results"`
	}{OK: true}
	var encodings []string
	d := worker.NewDecoder(bytes.NewReader(stream), 0, 0)
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r := result{Replica: f.Replica, OK: true, Encoding: f.Encoding.String()}
		if f.Encoding == worker.EncodingJSON {
			if !f.ValidJSON() {
				t.Fatalf("replica %d: invalid JSON %q", f.Replica, f.Payload)
			}
			r.Value = f.Payload
		} else {
			r.ValueB64 = f.Payload
		}
		doc.Results = append(doc.Results, r)
		encodings = append(encodings, r.Encoding)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := runPython(t, pyValues+`
import json, sys, tpurun
got = tpurun.decode_results(json.load(sys.stdin))
bad = ["replica %d: sent %r, got back %r" % (i, v, got.get(i)) for i, v in enumerate(VALUES) if not same(v, got.get(i))]
print(json.dumps({"bad": bad, "want_encodings": ENCODINGS}))
`, b)
	var res struct {
		Bad           []string `json:"bad"`
		WantEncodings []string `json:"want_encodings"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python said %q: %v", out, err)
	}
	for _, s := range res.Bad {
		t.Error(s)
	}
	if strings.Join(encodings, ",") != strings.Join(res.WantEncodings, ",") {
		t.Errorf("encodings %v, want %v", encodings, res.WantEncodings)
	}
}

// TestPythonReplicasFromEnv: the Python client refuses a channel without TPURUN_REPLICAS naming both variables,
// and never takes RANK for a replica.
func TestPythonReplicasFromEnv(t *testing.T) {
	out := runPython(t, `
import json, os, tpurun, tpurun._wire as w
def err(env):
    try:
        return "returned %r" % (w.replicas_from_env(env),)
    except tpurun.ChannelError as e:
        return str(e)
r, wfd = os.pipe()
os.environ.update({"TPURUN_RESULT_FD": str(wfd), "RANK": "1"})
try:
    opened = "returned %r" % (tpurun.report(1, 1),)
except tpurun.ChannelError as e:
    opened = str(e)
print(json.dumps({
    "channel": err({"TPURUN_RESULT_FD": "3", "RANK": "1"}),
    "rank only": err({"RANK": "1"}),
    "report": opened,
    "both": repr(w.replicas_from_env({"TPURUN_RESULT_FD": "3", "TPURUN_REPLICAS": "2,3", "RANK": "1"})),
}))
`, nil)
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python said %q: %v", out, err)
	}
	for _, k := range []string{"channel", "report"} {
		if !strings.Contains(got[k], worker.EnvResultFD) || !strings.Contains(got[k], worker.EnvReplicas) {
			t.Errorf("%s: %q does not name both %s and %s", k, got[k], worker.EnvResultFD, worker.EnvReplicas)
		}
	}
	if !strings.Contains(got["rank only"], "run this program under tpurun") {
		t.Errorf("RANK without a channel: %q, want the no-channel error", got["rank only"])
	}
	if got["both"] != "[2, 3]" {
		t.Errorf("TPURUN_REPLICAS=2,3: %s", got["both"])
	}
}

// TestPythonChannelBroken: after a failed write the Python client sends nothing more.
func TestPythonChannelBroken(t *testing.T) {
	out := runPython(t, `
import json, os, tpurun, tpurun._wire as w
writes = []
def flaky(fd, pieces):
    writes.append(b"".join(pieces))
    if len(writes) == 2:
        raise BlockingIOError(11, "write would block")
    return len(writes[-1])
w.os.writev = flaky
ch = w.Channel(9, None)
ch.report(0, "first")
errs = []
for r in (1, 2):
    try:
        ch.report(r, "later")
    except tpurun.ChannelError as e:
        errs.append(str(e))
print(json.dumps({"writes": len(writes), "errors": errs}))
`, nil)
	var got struct {
		Writes int      `json:"writes"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python said %q: %v", out, err)
	}
	if got.Writes != 2 || len(got.Errors) != 2 || !strings.Contains(got.Errors[1], "not sent") {
		t.Fatalf("after a failed write: %d writes, errors %q; want 2 writes and the later send refused", got.Writes, got.Errors)
	}
}

// TestPythonPartialWrites: a frame the pipe takes a piece at a time (os.writev writing less than it was given,
// splitting pieces and the header anywhere) arrives whole and in order: the bytes are the header and pickle.dumps's,
// for large objects the pickler passes apart (bytes, bytearray, a two-dimensional PickleBuffer) too.
func TestPythonPartialWrites(t *testing.T) {
	out := runPython(t, `
import json, pickle, tpurun._wire as w
got = bytearray()
calls = []
def partial(fd, pieces):
    data = b"".join(pieces)[:[5, 7777, 65536, 1][len(calls) % 4]]
    calls.append(len(pieces))
    got.extend(data)
    return len(data)
w.os.writev = partial
# PickleBuffers (a NumPy array's memory, of any shape) are written apart too, as buffers with no len().
values = [b"\x07" * 300000, [bytearray(b"x" * 70000), "y" * 1000, b"z" * 90000], {"k": (1, 2)},
          pickle.PickleBuffer(memoryview(bytearray(b"r" * 80000)).cast("B", (200, 400)))]
ch = w.Channel(9, None)
want = bytearray()
for i, v in enumerate(values):
    ch.report(i, v)
    want += w.encode(w.KIND_RESULT, w.ENC_PICKLE, i, pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL))
print(json.dumps({"same": bytes(got) == bytes(want), "got": len(got), "want": len(want), "calls": len(calls)}))
`, nil)
	var got struct {
		Same             bool
		Got, Want, Calls int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python said %q: %v", out, err)
	}
	if !got.Same || got.Calls < 4 {
		t.Fatalf("partial writes: %+v; want the frames' bytes whole, in order, over several calls", got)
	}
}

// TestPythonRefusesForeignDescriptor: with TPURUN_RESULT_ID set, the Python client takes only the very pipe it
// names, open for writing: a regular file at that number, the pipe's read end or a malformed identity are refused
// naming the variables, nothing is written into the file, and import tpurun leaves the file's descriptor
// inheritable (it is not the channel, so not tpurun's to change).
func TestPythonRefusesForeignDescriptor(t *testing.T) {
	out := runPython(t, `
import json, os, tempfile, tpurun, tpurun._wire as w
r, wfd = os.pipe()
st = os.fstat(wfd)
ident = "%d:%d" % (st.st_dev, st.st_ino)
f = tempfile.TemporaryFile()
os.set_inheritable(f.fileno(), True)
def attempt(fd, idv):
    w._channel = None
    os.environ.update({"TPURUN_RESULT_FD": str(fd), "TPURUN_RESULT_ID": idv, "TPURUN_REPLICAS": "0"})
    try:
        tpurun.report(0, "x")
        return None
    except tpurun.ChannelError as e:
        return str(e)
out = {"protect": w.protect_fd({"TPURUN_RESULT_FD": str(f.fileno()), "TPURUN_RESULT_ID": ident}),
       "inheritable": os.get_inheritable(f.fileno()),
       "file": attempt(f.fileno(), ident), "read_end": attempt(r, ident), "malformed": attempt(wfd, "pipe:3"),
       "file_bytes": os.fstat(f.fileno()).st_size}
out["pipe"] = attempt(wfd, ident)
out["read"] = len(os.read(r, 100))
out["no_id"] = attempt(f.fileno(), "")
print(json.dumps(out))
`, nil)
	var got struct {
		Protect     *int
		Inheritable bool
		File        *string
		ReadEnd     *string `json:"read_end"`
		Malformed   *string
		FileBytes   int `json:"file_bytes"`
		Pipe        *string
		Read        int
		NoID        *string `json:"no_id"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python said %q: %v", out, err)
	}
	has := func(s *string, parts ...string) bool {
		if s == nil {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(*s, p) {
				return false
			}
		}
		return true
	}
	if got.Protect != nil || !got.Inheritable {
		t.Errorf("import tpurun touched a foreign descriptor: protect_fd returned %v, inheritable %v", got.Protect != nil, got.Inheritable)
	}
	if !has(got.File, worker.EnvResultFD, worker.EnvResultID, "is a regular file", "not the pipe") || got.FileBytes != 0 {
		t.Errorf("a regular file: %v, %d bytes written", deref(got.File), got.FileBytes)
	}
	if !has(got.ReadEnd, "open read-only") {
		t.Errorf("the read end: %v", deref(got.ReadEnd))
	}
	if !has(got.Malformed, worker.EnvResultID, "want <st_dev>:<st_ino>") {
		t.Errorf("a malformed identity: %v", deref(got.Malformed))
	}
	if got.Pipe != nil || got.Read != worker.HeaderSize+3 {
		t.Errorf("the pipe itself: %v, %d bytes read", deref(got.Pipe), got.Read)
	}
	if got.NoID != nil {
		t.Errorf("without %s any writable descriptor is taken, as before: %v", worker.EnvResultID, deref(got.NoID))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestPythonLock: tpurun.Lock between processes: while one holds it, another's non-blocking and timed acquires
// fail; once it is released they succeed. It pickles as its path, a lock made without a name removes its private
// directory when it goes away, and a named lock outside a run says how to get one.
func TestPythonLock(t *testing.T) {
	py, dir := pythonModule(t)
	lockPath := filepath.Join(t.TempDir(), "the.lock")
	env := append(os.Environ(), "PYTHONPATH="+dir, "TPURUN_RUN_ID=", "PYTHONDONTWRITEBYTECODE=1")
	holder := exec.Command(py, "-c", `import sys, tpurun
lock = tpurun.Lock(path=sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()
lock.release()`, lockPath)
	holder.Env = env
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	other := func(src string) string {
		t.Helper()
		cmd := exec.Command(py, "-c", "import os, pickle, sys, tpurun\nlock = tpurun.Lock(path=sys.argv[1])\n"+src, lockPath)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := other(`print(lock.acquire(False), lock.acquire(timeout=0.05), lock.locked())`); got != "False False False" {
		t.Fatalf("while held elsewhere: %s", got)
	}
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatal(err)
	}
	got := other(`print(lock.acquire(timeout=30), lock.locked())
lock.release()
try:
    lock.release()
except RuntimeError as e:
    print(e)
print(pickle.loads(pickle.dumps(lock)).path == lock.path)
own = tpurun.Lock()
d = os.path.dirname(own.path)
with pickle.loads(pickle.dumps(own)):
    pass
print(os.path.isdir(d), end=" ")
del own
print(os.path.isdir(d))
try:
    tpurun.Lock("named")
except RuntimeError as e:
    print(e)`)
	want := "True True\nrelease unlocked lock\nTrue\nTrue False\ntpurun.Lock('named'): a named lock is shared by the workers of a run, and TPURUN_RUN_ID is not set"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
