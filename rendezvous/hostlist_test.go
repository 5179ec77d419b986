package rendezvous

import (
	"errors"
	"reflect"
	"strings"
	"testing"
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
		"n[0-65535]-r[0-65535]"}
	for _, in := range bad {
		if got, err := ParseSlurmNodelist(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v %v, want an ErrConfig error", in, got, err)
		} else if !strings.Contains(err.Error(), "SLURM") {
			t.Errorf("%q: error %v does not name SLURM", in, err)
		}
	}
}

func TestParseHosts(t *testing.T) {
	got, err := ParseHosts("10.0.0.1, host-b,h3")
	if err != nil || !reflect.DeepEqual(got, []string{"10.0.0.1", "host-b", "h3"}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, in := range []string{"", "a,,b", "a,", ",a", "a b", "a\tb", "a\"b"} {
		if _, err := ParseHosts(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want ErrConfig", in, err)
		}
	}
}

func TestStaticFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		env   func(string) string
		rank  int
		hosts []string
		ok    bool
		bad   string // the env var the error must name
	}{
		{env("TPU_WORKER_ID", "1", "TPU_WORKER_HOSTNAMES", "a,b"), 1, []string{"a", "b"}, true, ""},
		{env("SLURM_NODEID", "2", "SLURM_JOB_NODELIST", "n[1-3]"), 2, []string{"n1", "n2", "n3"}, true, ""},
		{env("JOB_COMPLETION_INDEX", "5"), 5, nil, true, ""},
		{env(), 0, nil, false, ""},
		{env("TPU_WORKER_ID", "2", "TPU_WORKER_HOSTNAMES", "a,b"), 0, nil, true, "TPU_WORKER_ID"},
		{env("TPU_WORKER_ID", "x", "TPU_WORKER_HOSTNAMES", "a,b"), 0, nil, true, "TPU_WORKER_ID"},
		{env("TPU_WORKER_ID", "0", "TPU_WORKER_HOSTNAMES", "a,,b"), 0, nil, true, "TPU_WORKER_HOSTNAMES"},
		{env("TPU_WORKER_ID", "0"), 0, nil, true, "TPU_WORKER_HOSTNAMES"},
		{env("SLURM_NODEID", "-1", "SLURM_JOB_NODELIST", "n1"), 0, nil, true, "SLURM_NODEID"},
		{env("SLURM_NODEID", "0", "SLURM_JOB_NODELIST", "n[1-"), 0, nil, true, "SLURM_JOB_NODELIST"},
		{env("JOB_COMPLETION_INDEX", "1e3"), 0, nil, true, "JOB_COMPLETION_INDEX"},
	}
	for i, tc := range cases {
		st, ok, err := StaticFromEnv(tc.env)
		if ok != tc.ok {
			t.Errorf("case %d: ok %v", i, ok)
		}
		if tc.bad != "" {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("case %d: error %v does not name %s", i, err, tc.bad)
			}
			continue
		}
		if err != nil || st.NodeRank != tc.rank || !reflect.DeepEqual(st.Hosts, tc.hosts) {
			t.Errorf("case %d: %+v %v", i, st, err)
		}
	}
}

func TestParseConf(t *testing.T) {
	c, err := ParseConf("join_timeout=60, is_host=true")
	if err != nil || c["join_timeout"] != "60" || c["is_host"] != "true" {
		t.Fatalf("%v %v", c, err)
	}
	for _, in := range []string{"x", "=1", "a=1,a=2", "a=1,,b=2"} {
		if _, err := ParseConf(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v", in, err)
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
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%q: error %v is not ErrConfig", s, err)
			}
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("%q: %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if checkHost(h) != nil {
				t.Fatalf("%q gave bad host %q", s, h)
			}
		}
	})
}

func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"a,b", "", ",", "a,,b", " a ", "a\x00", strings.Repeat("a,", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHosts(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		for _, h := range hosts {
			if checkHost(h) != nil {
				t.Fatalf("%q gave %q", s, h)
			}
		}
	})
}
