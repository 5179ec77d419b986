package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestLoggerRecordsHaveUniqueKeys: a key the logger's context has, or that a record gives twice, appears once in
// the JSON record (the first value): the rendezvous logs "job closed" with the run id on a job's logger that
// carries it already. A namespace's fields are its own.
func TestLoggerRecordsHaveUniqueKeys(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger("json", zapcore.InfoLevel, &b)
	if err != nil {
		t.Fatal(err)
	}
	job := log.With(zap.String("run_id", "job-1"))
	job.Info("rendezvous: job closed", zap.String("run_id", "job-1"), zap.Int("generation", 2), zap.Int("generation", 3))
	job.With(zap.String("run_id", "other"), zap.String("rdzv_backend", "tcp")).Info("nested", zap.Namespace("peer"), zap.String("run_id", "peer-run"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(lines), b.String())
	}
	for i, want := range []string{`"run_id":"job-1"`, `"run_id":"job-1"`} {
		if n := strings.Count(lines[i], `"run_id":`); n != map[int]int{0: 1, 1: 2}[i] || !strings.Contains(lines[i], want) {
			t.Errorf("record %d: %d run_id keys (want %d, the first value kept):\n%s", i, n, map[int]int{0: 1, 1: 2}[i], lines[i])
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("record %d is not JSON: %v\n%s", i, err, lines[i])
		}
	}
	if strings.Count(lines[0], `"generation":`) != 1 || !strings.Contains(lines[0], `"generation":2`) {
		t.Errorf("a key given twice in one record is kept once, the first: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"peer":{"run_id":"peer-run"}`) || !strings.Contains(lines[1], `"rdzv_backend":"tcp"`) {
		t.Errorf("a namespace's own run_id, or a new key of the context, was dropped: %s", lines[1])
	}
}
