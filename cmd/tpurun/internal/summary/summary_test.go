package summary_test

import (
	"bytes"
	"strings"
	"testing"

	"tpurun/cmd/tpurun/internal/summary"
	"tpurun/internal/results"
)

func TestWriteResultsSummary(t *testing.T) {
	doc := &results.Document{
		Violations: []results.Violation{{Kind: "duplicate_result", Message: "2 results for replica 0: rank 0 pid 1 and rank 1 pid 2", Hint: "SPMD"}},
		Results: []results.Result{{Replica: 0, OK: true}, {Replica: 1, Rank: 1, PID: 2,
			Error: &results.ErrorInfo{Type: "ValueError", Message: "boom", Traceback: "Traceback:\n  line 3\nValueError: boom\n"}}},
	}
	var b bytes.Buffer
	summary.WriteResults(&b, nil, doc, true)
	for _, want := range []string{"results: duplicate_result: 2 results for replica 0", "hint: SPMD",
		"root cause: replica 1 (rank 1, pid 2) raised ValueError: boom", "    line 3"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset() // with the document printed (--json): the error named once, its traceback left to the document
	summary.WriteResults(&b, nil, doc, false)
	if s := b.String(); !strings.Contains(s, "raised ValueError: boom") || strings.Contains(s, "line 3") {
		t.Fatalf("summary without tracebacks:\n%s", s)
	}
	b.Reset()
	summary.WriteResults(&b, nil, &results.Document{Results: []results.Result{{OK: true}}}, true)
	if b.Len() != 0 {
		t.Fatalf("clean document wrote %q", b.String())
	}
}
