package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/proc"
)

func sampleDoc() *Document {
	return &Document{RunID: "run-1", World: World{Size: 2, Nodes: 1},
		Results: []Result{
			{Replica: 0, Rank: 0, PID: 41, OK: true, Encoding: "json", Value: json.RawMessage(`{"loss": 0.5}`)},
			{Replica: 1, Rank: 1, PID: 42, OK: true, Encoding: "pickle", ValueB64: []byte{0x80, 5, 'K', 1, '.'}},
			{Replica: 2, Rank: 1, PID: 42, Error: &ErrorInfo{Type: "ValueError", Message: "boom", Traceback: "tb"}},
		},
		Ranks:      []RankStatus{{RankExit: RankExit{Rank: 0, PID: 41}, OK: true}, {RankExit: RankExit{Rank: 1, PID: 42, ExitCode: 137, Signal: "killed"}}},
		Violations: []Violation{{Kind: "duplicate_result", Message: "m", Replica: 0, Rank: 0, PID: 41, Hint: "h"}},
		ExitCode:   137,
	}
}

func TestDocumentShape(t *testing.T) {
	b, err := json.Marshal(sampleDoc())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"run_id", "world", "results", "ranks", "violations", "ok", "exit_code"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("document lacks %q: %s", k, b)
		}
	}
	res := m["results"].([]any)
	r0, r1, r2 := res[0].(map[string]any), res[1].(map[string]any), res[2].(map[string]any)
	if r0["value"].(map[string]any)["loss"] != 0.5 || r1["value_b64"] != "gAVLAS4=" || r1["encoding"] != "pickle" ||
		r2["error"].(map[string]any)["type"] != "ValueError" || r2["ok"] != false {
		t.Fatalf("results: %s", b)
	}
	rk := m["ranks"].([]any)[1].(map[string]any)
	if rk["exit_code"] != float64(137) || rk["signal"] != "killed" || rk["rank"] != float64(1) {
		t.Fatalf("ranks: %s", b)
	}
}

// TestExitOf: the one conversion of a proc.Exit into the document's rank entry: the code, or 128+N and the
// signal's name, with the rank and pid; the rest of the Exit (time, resource usage) stays out of the document.
func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		ex   proc.Exit
		want string
	}{
		{proc.Exit{PID: 41, Wall: time.Second, MaxRSS: 1 << 20}, `{"rank":3,"pid":41,"exit_code":0}`},
		{proc.Exit{PID: 42, ExitCode: 85}, `{"rank":3,"pid":42,"exit_code":85}`},
		{proc.Exit{PID: 43, ExitCode: -1, Signal: syscall.SIGKILL}, `{"rank":3,"pid":43,"exit_code":137,"signal":"SIGKILL"}`},
		{proc.Exit{PID: 44, ExitCode: -1, Signal: 42}, `{"rank":3,"pid":44,"exit_code":170,"signal":"signal 42"}`},
	} {
		x := ExitOf(3, tc.ex)
		b, err := json.Marshal(RankStatus{RankExit: x, OK: !x.Failed()})
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(tc.want, "}") + `,"ok":` + strconv.FormatBool(tc.ex.Success()) + "}"
		if string(b) != want || x.Failed() == tc.ex.Success() {
			t.Errorf("ExitOf(%+v) = %s, want %s", tc.ex, b, want)
		}
	}
}

func TestWriteFileAtomicAndSafe(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	// A planted symlink at the destination is replaced, never followed.
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "results.json")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, sampleDoc()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the symlink target was overwritten: %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("results file: %v %v", fi.Mode(), err)
	}
	var back Document
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil || back.RunID != "run-1" || len(back.Results) != 3 ||
		string(back.Results[1].ValueB64) != string(sampleDoc().Results[1].ValueB64) {
		t.Fatalf("read back: %+v %v", back, err)
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
	// A directory that cannot be written names the path.
	if err := WriteFile(filepath.Join(dir, "missing", "r.json"), sampleDoc()); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "missing", "r.json")) {
		t.Fatalf("error does not name the path: %v", err)
	}
}

func TestFinishEmptyIsValidJSON(t *testing.T) {
	doc, err := NewCollector(Options{}).Finish(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(doc)
	if !strings.Contains(string(b), `"results":[]`) || !strings.Contains(string(b), `"violations":[]`) || !doc.OK {
		t.Fatalf("%s", b)
	}
}
