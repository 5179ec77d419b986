package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var jsonSeeds = []string{
	`0`, `-0`, `-`, `01`, `1.`, `1.5e`, `1e+9`, `-1.25E-3`, `.5`, `+1`, `1e`, `true`, `tru`, `nul`, `null `, ` false`,
	`""`, `"`, `"\"`, `"\u00e9\n"`, `"\u00G0"`, `"\x"`, "\"tab\there\"", "\"\x7f\xff\xfe\"", "\"caf\xe9\"", "{\"k\xc3\":1}", "\"\xed\xa0\x80\"", `"abcdefgh\"ijklmnop"`,
	`"0123456789abcdef0123456789"`, "\"0123456789\x01abcdef\"", `[]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `{"a":1,}`,
	`{"a" 1}`, `{1:2}`, `{"a":[{"b":null}]}`, `[1]]`, `{}{}`, "\n[\t1 ,\r2 ]\n", ``, ` `, `"\ud800"`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	long := strings.Repeat("abcdefgh", 3000)
	seeds := append(slices.Clone(jsonSeeds), `"`+long+`"`, `"`+long, `["`+long+`\"`+long+`"]`,
		`"`+long+"\x01"+long+`"`, `"`+long+`\q"`, `{"`+long+`":"`+long+`"}`)
	for _, s := range seeds {
		want := json.Valid([]byte(s)) && utf8.Valid([]byte(s))
		if got := ValidJSON([]byte(s)); got != want {
			t.Errorf("ValidJSON(%.40q) = %v, json.Valid says %v", s, got, want)
		}
		// Through the decoder, as the collector sees it.
		b, _ := Encode(Frame{Kind: KindResult, Encoding: EncodingJSON, Payload: []byte(s)})
		f, err := NewDecoder(bytes.NewReader(b), 0, 0).Next()
		if err != nil || f.ValidJSON() != want {
			t.Errorf("decoded frame %.40q: ValidJSON %v, want %v (%v)", s, f.ValidJSON(), want, err)
		}
	}
}

// FuzzValidJSON is a differential fuzzer: ValidJSON must agree with encoding/json on every input.
func FuzzValidJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b) && utf8.Valid(b)
		if got := ValidJSON(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValidJSONString(b *testing.B) {
	p := []byte(`"` + strings.Repeat("abcdefghijklmnop", 1<<16) + `"`)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if !ValidJSON(p) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkEncodingJSONValidString(b *testing.B) {
	p := []byte(`"` + strings.Repeat("abcdefghijklmnop", 1<<16) + `"`)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if !json.Valid(p) {
			b.Fatal("invalid")
		}
	}
}

// TestCheckJSONHugeIntegers: CheckJSON refuses, with a *HugeIntegerError naming its place and length, exactly the
// JSON integers Python's json would refuse to read (more than 4300 digits); floats of any length and invalid JSON
// are what they were.
func TestCheckJSONHugeIntegers(t *testing.T) {
	d := func(n int) string { return "1" + strings.Repeat("0", n-1) }
	for _, tc := range []struct {
		in     string
		at, n  int // the huge integer's offset and digits; n == 0: none
		except error
	}{
		{in: d(4300)},
		{in: "-" + d(4300)},
		{in: d(4301), at: 0, n: 4301},
		{in: "-" + d(4301), at: 0, n: 4301},
		{in: `{"a": [1, ` + d(5000) + `]}`, at: 10, n: 5000},
		{in: `[` + d(4301) + `, ` + d(6000) + `]`, at: 1, n: 4301}, // the first one is named
		{in: d(5000) + ".5"},
		{in: d(5000) + "e3"},
		{in: "0." + d(5000)},
		{in: `"` + d(5000) + `"`},
		{in: "[" + d(5000), except: ErrInvalidJSON},
	} {
		err := CheckJSON([]byte(tc.in))
		var huge *HugeIntegerError
		switch {
		case tc.except != nil:
			if !errors.Is(err, tc.except) {
				t.Errorf("%.30q: %v, want %v", tc.in, err, tc.except)
			}
		case tc.n == 0:
			if err != nil {
				t.Errorf("%.30q (%d bytes): %v, want nil", tc.in, len(tc.in), err)
			}
		case !errors.As(err, &huge) || !errors.Is(err, ErrHugeInteger) || huge.Offset != tc.at || huge.Digits != tc.n:
			t.Errorf("%.30q: %v, want an integer of %d digits at byte %d", tc.in, err, tc.n, tc.at)
		}
	}
}
