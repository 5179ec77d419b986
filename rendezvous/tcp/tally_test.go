package tcp

import (
	"errors"
	"testing"
	"time"

	"tpurun/internal/testutil"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRefusalsSummarized: the first refusal is logged at once; the others of the interval become one line with
// their counts when it ends; nothing is logged for an interval without refusals.
func TestRefusalsSummarized(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	const every = 300 * time.Millisecond
	tl := newTally(zap.New(core), every)
	tl.refused(reasonBadToken, "10.0.0.9:4000", errors.New("wrong token"))
	if logs.Len() != 1 {
		t.Fatalf("%d lines after the first refusal, want it logged at once", logs.Len())
	}
	for range 1000 {
		tl.refused(reasonTimedOut, "10.0.0.8:4001", nil)
	}
	tl.refused(reasonEvicted, "10.0.0.7:4002", nil)
	if logs.Len() != 1 {
		t.Fatalf("%d lines, want the rest held for the summary", logs.Len())
	}
	testutil.Eventually(t, "the summary line", func() bool { return logs.Len() >= 2 })
	all := logs.All()
	if gap := all[1].Time.Sub(all[0].Time); gap < every*8/10 {
		t.Fatalf("summary %s after the first line, want about %s", gap, every)
	}
	f := all[1].ContextMap()
	if f["timed_out"] != int64(1000) || f["evicted"] != int64(1) || f["bad_token"] != nil || f["last_remote"] != "10.0.0.7:4002" {
		t.Fatalf("summary fields %v", f)
	}
	tl.stop()
	if logs.Len() != 2 {
		t.Fatalf("%d lines after stop with nothing new, want 2", logs.Len())
	}
	st := tl.stats()
	if st.Refused[reasonTimedOut] != 1000 || st.Refused[reasonBadToken] != 1 || st.Refused[reasonEvicted] != 1 {
		t.Fatalf("totals %v", st.Refused)
	}
}
