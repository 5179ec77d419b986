package launcher_test

import (
	"errors"
	"testing"

	"tpurun/launcher"
)

func TestParseStdSpec(t *testing.T) {
	for in, want := range map[string]launcher.StdSpec{
		"":        {},
		"3":       {All: launcher.StdAll},
		" 1 ":     {All: launcher.StdOut},
		"0:1,1:2": {PerRank: map[int]launcher.Std{0: launcher.StdOut, 1: launcher.StdErr}},
	} {
		got, err := launcher.ParseStdSpec("--tee", in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		for lr := range 3 {
			if got.For(lr) != want.For(lr) {
				t.Errorf("%q: local rank %d got %d, want %d", in, lr, got.For(lr), want.For(lr))
			}
		}
	}
	for _, bad := range []string{"4", "-1", "x", "0:", ":1", "0:1,0:2", "0:1,,", "1:9", "0;1", "a:1", "99999999999999999999"} {
		_, err := launcher.ParseStdSpec("--redirects", bad)
		var ce *launcher.ConfigError
		if !errors.As(err, &ce) || ce.Field != "--redirects" || ce.Value == "" {
			t.Errorf("%q: err %v, want a ConfigError naming --redirects and the value", bad, err)
		}
	}
}

func TestParseRanks(t *testing.T) {
	got, err := launcher.ParseRanks("--local-ranks-filter", "3, 0,1-2,2")
	if err != nil || len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("got %v %v, want [0 1 2 3]", got, err)
	}
	for _, bad := range []string{"a", "-1", "3-1", "1,,2", "0-99999999", "1-", "-"} {
		if _, err := launcher.ParseRanks("--local-ranks-filter", bad); !errors.Is(err, launcher.ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
}

func TestParseErrorFile(t *testing.T) {
	rec, err := launcher.ParseErrorFile([]byte(`{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback\n  x\n", "timestamp": "17"}}}`))
	if err != nil || rec.Message != "RuntimeError: boom" || rec.Traceback != "Traceback\n  x\n" || rec.Timestamp != "17" {
		t.Fatalf("got %+v %v", rec, err)
	}
	if rec, err := launcher.ParseErrorFile([]byte(`{"message": "plain"}`)); err != nil || rec.Message != "plain" {
		t.Fatalf("plain message: %+v %v", rec, err)
	}
	for _, bad := range []string{``, `{}`, `null`, `[]`, `{"message": null}`, `{"message": 3}`, `{"message": {"message": 1}}`, `{"message"`} {
		if _, err := launcher.ParseErrorFile([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseStdSpec(f *testing.F) {
	for _, s := range []string{"", "3", "0:1,1:2", "0:1,0:2", ":", ",", "1:-1", "\x00", "9999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := launcher.ParseStdSpec("--tee", s)
		if err != nil {
			if !errors.Is(err, launcher.ErrConfig) {
				t.Fatalf("%q: error %v is not ErrConfig", s, err)
			}
			return
		}
		for lr := range 4 {
			if v := spec.For(lr); v < launcher.StdNone || v > launcher.StdAll {
				t.Fatalf("%q: local rank %d got %d", s, lr, v)
			}
		}
	})
}

func FuzzParseRanks(f *testing.F) {
	for _, s := range []string{"", "0", "0,1", "2-5", "5-2", "-", "0-65536", "1,1,1", " 3 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := launcher.ParseRanks("--local-ranks-filter", s)
		if err != nil {
			if !errors.Is(err, launcher.ErrConfig) {
				t.Fatalf("%q: error %v is not ErrConfig", s, err)
			}
			return
		}
		for i := 1; i < len(rs); i++ {
			if rs[i] <= rs[i-1] || rs[i-1] < 0 {
				t.Fatalf("%q: ranks %v not sorted, unique and non-negative", s, rs)
			}
		}
	})
}

func FuzzParseErrorFile(f *testing.F) {
	for _, s := range []string{`{"message": {"message": "m", "extraInfo": {"py_callstack": "tb"}}}`, `{"message": "x"}`,
		`{"message": {}}`, `{"message": []}`, `{`, "\xff\xfe", `{"message": {"extraInfo": null}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := launcher.ParseErrorFile(b)
		if err == nil && rec == nil {
			t.Fatal("nil record without an error")
		}
	})
}
