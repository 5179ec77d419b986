package cli_test

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/console"
	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
)

func TestParseStdSpec(t *testing.T) {
	for in, want := range map[string]console.StdSpec{
		"":        {},
		"3":       {All: console.StdAll},
		" 1 ":     {All: console.StdOut},
		"0:1,1:2": {PerRank: map[int]console.Std{0: console.StdOut, 1: console.StdErr}},
	} {
		got, err := cli.ParseStdSpec("--tee", in)
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
		_, err := cli.ParseStdSpec("--redirects", bad)
		var ce *failure.ConfigError
		if !errors.As(err, &ce) || ce.Field != "--redirects" || ce.Value == "" {
			t.Errorf("%q: err %v, want a ConfigError naming --redirects and the value", bad, err)
		}
	}
}

func TestParseRanks(t *testing.T) {
	got, err := cli.ParseRanks("--local-ranks-filter", "3, 0,1-2,2")
	if err != nil || len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("got %v %v, want [0 1 2 3]", got, err)
	}
	for _, bad := range []string{"a", "-1", "3-1", "1,,2", "0-99999999", "1-", "-"} {
		if _, err := cli.ParseRanks("--local-ranks-filter", bad); !errors.Is(err, failure.ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
}

func FuzzParseStdSpec(f *testing.F) {
	for _, s := range []string{"", "3", "0:1,1:2", "0:1,0:2", ":", ",", "1:-1", "\x00", "9999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := cli.ParseStdSpec("--tee", s)
		if err != nil {
			if !errors.Is(err, failure.ErrConfig) {
				t.Fatalf("%q: error %v is not ErrConfig", s, err)
			}
			return
		}
		for lr := range 4 {
			if v := spec.For(lr); v < console.StdNone || v > console.StdAll {
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
		rs, err := cli.ParseRanks("--local-ranks-filter", s)
		if err != nil {
			if !errors.Is(err, failure.ErrConfig) {
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

func FuzzParseSignals(f *testing.F) {
	for _, s := range []string{"", ",", "SIGTERM", "TERM,INT", "sigusr1, SIGUSR2 ", "SIGKILL", "SIGSTOP", "15", "SIG", "\x00", "SIGTERM,,SIGHUP", strings.Repeat("SIGINT,", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sigs, err := cli.ParseSignals(s)
		if (err == nil) == (len(sigs) == 0) {
			t.Fatalf("ParseSignals(%q) = %v, %v: want signals xor an error", s, sigs, err)
		}
		for _, sg := range sigs {
			if sg == syscall.SIGKILL || sg == syscall.SIGSTOP {
				t.Fatalf("ParseSignals(%q) accepted %v", s, sg)
			}
		}
	})
}

// FuzzNprocs: the --nprocs / --nproc-per-node parser accepts exactly whole numbers 1..65536 (and device words for
// --nproc-per-node), never panics, and its results round-trip.
func FuzzNprocs(f *testing.F) {
	for _, s := range []string{"1", "8", "0", "-1", "+4", "04", " 4", "4 ", "auto", "AUTO", "cpu", "gpu", "tpu", "xpu",
		"", "1e3", "0x10", "65536", "65537", "99999999999999999999", "4\n", "٣", "2,4", "nan"} {
		f.Add("nprocs", s)
		f.Add("nproc-per-node", s)
	}
	f.Fuzz(func(t *testing.T, flag, s string) {
		n, dev, err := cli.ParseNProcs(flag, s)
		if err != nil {
			if n != 0 || dev != "" || err.Error() == "" {
				t.Fatalf("%q: error %v with n=%d dev=%q", s, err, n, dev)
			}
			return
		}
		if dev != "" {
			if flag == "nprocs" || n != 0 {
				t.Fatalf("%s %q: device word %q with n=%d", flag, s, dev, n)
			}
			return
		}
		if n < 1 || n > 65536 || strings.TrimSpace(s) != strconv.Itoa(n) {
			t.Fatalf("%s %q: accepted as %d", flag, s, n)
		}
	})
}

// FuzzNNodes: --nnodes never panics, and what it accepts is a node count in range that prints back.
func FuzzNNodes(f *testing.F) {
	for _, s := range []string{"1", "4", "4:4", "1:4", "0", "-1", "", " 8 ", "65536", "65537", "4:", ":4", "1e3", "0x10",
		"99999999999999999999", "4:4:4", "\x00", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, n, err := cli.ParseNNodes(s)
		if err != nil {
			var ce *failure.ConfigError
			if !errors.As(err, &ce) || ce.Field != "nnodes" || ce.Value != strings.TrimSpace(s) {
				t.Fatalf("error does not name the setting and the value: %v", err)
			}
			return
		}
		if n < 1 || n > 65536 || lo < 0 || (lo > 0 && (lo >= n || !strings.Contains(s, ":"))) {
			t.Fatalf("%q accepted as %d:%d", s, lo, n)
		}
	})
}

// TestParseNNodesElastic: torchrun's MIN:MAX is an elastic world; MIN == MAX and N are fixed ones.
func TestParseNNodesElastic(t *testing.T) {
	for in, want := range map[string][2]int{"4": {0, 4}, "4:4": {0, 4}, "2:4": {2, 4}, " 1:3 ": {1, 3}, "": {0, 1}} {
		lo, n, err := cli.ParseNNodes(in)
		if err != nil || lo != want[0] || n != want[1] {
			t.Errorf("ParseNNodes(%q) = %d:%d, %v; want %d:%d", in, lo, n, err, want[0], want[1])
		}
	}
	for _, in := range []string{"4:2", "0:2", "2:", ":2", "1:65537"} {
		if _, _, err := cli.ParseNNodes(in); failure.ExitCode(err) != exitcode.Usage {
			t.Errorf("ParseNNodes(%q): %v, want a configuration error", in, err)
		}
	}
}
