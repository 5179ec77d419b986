package topology

import (
	"errors"
	"strings"
	"testing"
)

// The seed corpora are the nasty cases: empty, whitespace, signs, overflow, separators alone, unicode, NUL.

func FuzzParseAcceleratorType(f *testing.F) {
	for _, s := range []string{"v4-8", "v4-16", "v5litepod-8", "v5p-16", "v6e-8", "tpu7x-8", "v2-8", "v3-32", "v5e-4", "V4-8", "v4-",
		"-8", "v4-0", "v4-7", "v4--8", "v4-+8", "v4-8-8", "v4-99999999999999999999", "v9-8", "", " ", "v4-8\x00", "ｖ4-8", "v5litepod-12", "v6e-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAcceleratorType(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		if a.Chips() < 1 || a.Hosts() < 1 || a.Hosts()*a.ChipsPerHost() != a.Chips() {
			t.Fatalf("%q: chips %d hosts %d per host %d", s, a.Chips(), a.Hosts(), a.ChipsPerHost())
		}
		if hb := a.HostBounds(); hb.Product() != a.Hosts() {
			t.Fatalf("%q: host bounds %v for %d hosts", s, hb, a.Hosts())
		}
		if b, err := ParseAcceleratorType(a.Type); err != nil || b.Type != a.Type {
			t.Fatalf("%q: canonical %q does not round-trip: %v", s, a.Type, err)
		}
	})
}

func FuzzParseBounds(f *testing.F) {
	for _, s := range []string{"2,2,1", "2,2,2,2", "2,x,1", "2,2", "", ",,", "1,1,1,", "0,1,1", "-1,1,1", "+1,1,1", "99999999999999999999,1,1", " 2, 2 ,1 ", "2,2,1\n", "１,1,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBounds(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		for _, v := range b {
			if v < 1 || v > maxExtent {
				t.Fatalf("%q: extent %d", s, v)
			}
		}
		if c, err := ParseBounds(b.String()); err != nil || c.String() != b.String() {
			t.Fatalf("%q does not round-trip via %q", s, b)
		}
	})
}

func FuzzParseHostList(f *testing.F) {
	for _, s := range []string{"ip0,ip1", "a,,b", ",", "", " ", "a, b", "a,a", "10.0.0.1,[::1]", "host name", "a/b", "a\x00b", strings.Repeat("a", 300), "job-0.svc.cluster.local"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostList(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, ", \t\n") || seen[h] {
				t.Fatalf("%q: bad entry %q in %q", s, h, hosts)
			}
			seen[h] = true
		}
	})
}

func FuzzParseTPUEnv(f *testing.F) {
	for _, s := range []string{"ACCELERATOR_TYPE: 'v4-16'\nWORKER_ID: '1'\n", "", "\n\n", "<html>", "KEY:", "KEY: '", "KEY: 'a\"", ": 'x'", "lower: 'x'",
		"A: 'x'\r\nB: \"y\"", "A: b: c", strings.Repeat("A: 'x'\n", 1000), "A: '\x00'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kv, err := ParseTPUEnv(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		if len(kv) == 0 {
			t.Fatal("success with no keys")
		}
		for k := range kv {
			if k == "" || strings.ContainsAny(k, " :'\"") {
				t.Fatalf("bad key %q", k)
			}
		}
	})
}

func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"w-0:8470:10.0.0.2,w-1:8470:10.0.0.3", "", ",", "a:b", "a:b:", "a:b:c:d", "a:b:10.0.0.2,a:b:10.0.0.2", " w:1:ip ", "w:1:ip,", "w:1:bad host",
		"t1v-w-0,t1v-w-1", "t1v-w-0,w:1:10.0.0.3", "host", "host,host"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ips, _, err := parseEndpoints(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		if len(ips) == 0 {
			t.Fatal("success with no endpoints")
		}
		if _, err := ParseHostList(strings.Join(ips, ",")); err != nil {
			t.Fatalf("endpoints %q are not a valid host list: %v", ips, err)
		}
	})
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"4", "0", "-1", "+4", "abc", "", " 8 ", "4.0", "0x10", "99999999999999999999", "65536", "65537", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseCount(s); err == nil && (n < 1 || n > maxCount) {
			t.Fatalf("%q -> %d", s, n)
		} else if err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("error without ErrParse: %v", err)
		}
		if n, err := ParseIndex(s); err == nil && (n < 0 || n >= maxCount) {
			t.Fatalf("index %q -> %d", s, n)
		}
	})
}

func FuzzParseChipList(f *testing.F) {
	for _, s := range []string{"0,1,2,3", "3", "", ",", "0,,1", "0,0", "-1", "1,a", " 0 , 1 ", "99999999999999999999", "4096", "0,1,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		chips, err := ParseChipList(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		seen := map[int]bool{}
		for _, c := range chips {
			if c < 0 || c >= maxExtent || seen[c] {
				t.Fatalf("%q -> %v", s, chips)
			}
			seen[c] = true
		}
	})
}

func FuzzParseGPUList(f *testing.F) {
	for _, s := range []string{"0", "0,1", "", "-1", " ", "1,1", "GPU-8f6c2a1e-0000", "MIG-GPU-aa/1/0", "0,GPU-x", "GPU-", "GPU-a b", "4096", "00,0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseGPUList(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error without ErrParse: %v", err)
			}
			return
		}
		if len(ids) == 0 {
			t.Fatal("success with no GPUs")
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if id == "" || seen[id] || strings.ContainsAny(id, ", ") {
				t.Fatalf("ids %q: empty, repeated or unsplit entry %q", ids, id)
			}
			seen[id] = true
		}
	})
}
