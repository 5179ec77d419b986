package topology

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"tpurun/internal/hostname"
)

func TestParseSlurmNodelist(t *testing.T) {
	good := []struct {
		in   string
		want []string
	}{
		{"host1", []string{"host1"}},
		{"tpu-[01-03,07]", []string{"tpu-01", "tpu-02", "tpu-03", "tpu-07"}},
		{"a[1-2],b,c[9-10]", []string{"a1", "a2", "b", "c9", "c10"}},
		{"rack[1-2]-n[1-2]", []string{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
		{"n[8-11]-ib", []string{"n8-ib", "n9-ib", "n10-ib", "n11-ib"}},
		{"x[007]", []string{"x007"}},
		{" a , b ", []string{"a", "b"}},
	}
	for _, tc := range good {
		got, err := ParseSlurmNodelist(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
	bad := []string{"", " ", "a,,b", "a[", "a]", "a[]", "a[3-1]", "a[1-]", "a[-1]", "a[x]", "a[[1]]", "a[1-99999999]",
		"a[0-4294967295]", "a b", "a[1-2]b[", ",", "a[1,,2]", "a\x00b", "a[18446744073709551616]",
		"n[0-65535]-r[0-65535]", "a,a", "x[1-2],x1"}
	for _, in := range bad {
		if got, err := ParseSlurmNodelist(in); !errors.Is(err, ErrParse) {
			t.Errorf("%q: %v %v, want an ErrParse error", in, got, err)
		} else if !strings.Contains(err.Error(), "SLURM") {
			t.Errorf("%q: error %v does not name SLURM", in, err)
		}
	}
}

func FuzzParseSlurmNodelist(f *testing.F) {
	for _, s := range []string{"host1", "tpu-[01-03,07]", "rack[1-2]-n[1-2]", "a[", "a[3-1]", "a[0-4294967295]",
		"n[0-65535]-r[0-65535]", "[]", "[1-2]", ",,,", "a[1-2]b[3-4]c[5-6]", "\xff\xfe", "a[00-10]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseSlurmNodelist(s)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("%q: error %v is not ErrParse", s, err)
			}
			return
		}
		if len(hosts) == 0 || len(hosts) > maxCount {
			t.Fatalf("%q: %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if hostname.Check(h) != nil {
				t.Fatalf("%q gave bad host %q", s, h)
			}
		}
	})
}
