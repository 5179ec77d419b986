package attempt_test

import (
	"testing"

	"tpurun/internal/attempt"
)

func TestParseErrorFile(t *testing.T) {
	rec, err := attempt.ParseErrorFile([]byte(`{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback\n  x\n", "timestamp": "17"}}}`))
	if err != nil || rec.Message != "RuntimeError: boom" || rec.Traceback != "Traceback\n  x\n" || rec.Timestamp != "17" {
		t.Fatalf("got %+v %v", rec, err)
	}
	if rec, err := attempt.ParseErrorFile([]byte(`{"message": "plain"}`)); err != nil || rec.Message != "plain" {
		t.Fatalf("plain message: %+v %v", rec, err)
	}
	for _, bad := range []string{``, `{}`, `null`, `[]`, `{"message": null}`, `{"message": 3}`, `{"message": {"message": 1}}`, `{"message"`} {
		if _, err := attempt.ParseErrorFile([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseErrorFile(f *testing.F) {
	for _, s := range []string{`{"message": {"message": "m", "extraInfo": {"py_callstack": "tb"}}}`, `{"message": "x"}`,
		`{"message": {}}`, `{"message": []}`, `{`, "\xff\xfe", `{"message": {"extraInfo": null}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := attempt.ParseErrorFile(b)
		if err == nil && rec == nil {
			t.Fatal("nil record without an error")
		}
	})
}
