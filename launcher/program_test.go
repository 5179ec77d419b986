package launcher_test

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/launcher"
)

func TestPythonProgramLikeTorchrun(t *testing.T) {
	env, noEnv := "/opt/py", ""
	for _, c := range []struct {
		args                      []string
		module, noPython, runPath bool
		getenv                    string
		want                      string
	}{
		{[]string{"train.py", "--lr", "3"}, false, false, false, noEnv, "python3 -u train.py --lr 3"},
		{[]string{"train.py"}, false, false, false, env, "/opt/py -u train.py"},
		{[]string{"pkg.train", "x"}, true, false, false, env, "/opt/py -u -m pkg.train x"},
		{[]string{"train.py"}, false, true, false, env, "train.py"},
		{[]string{"./bin/worker"}, false, false, false, env, "./bin/worker"},
		{[]string{"script"}, false, false, true, noEnv, "python3 -u script"},
	} {
		got := strings.Join(launcher.PythonCommand(c.args, c.module, c.noPython, c.runPath, c.getenv), " ")
		if got != c.want {
			t.Errorf("PythonCommand(%q, m=%v, no-python=%v, run-path=%v) = %q, want %q", c.args, c.module, c.noPython, c.runPath, got, c.want)
		}
	}
}

func FuzzParseSignals(f *testing.F) {
	for _, s := range []string{"", ",", "SIGTERM", "TERM,INT", "sigusr1, SIGUSR2 ", "SIGKILL", "SIGSTOP", "15", "SIG", "\x00", "SIGTERM,,SIGHUP", strings.Repeat("SIGINT,", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sigs, err := launcher.ParseSignals(s)
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
		n, dev, err := launcher.ParseNProcs(flag, s)
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
		lo, n, err := launcher.ParseNNodes(s)
		if err != nil {
			var ce *launcher.ConfigError
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
		lo, n, err := launcher.ParseNNodes(in)
		if err != nil || lo != want[0] || n != want[1] {
			t.Errorf("ParseNNodes(%q) = %d:%d, %v; want %d:%d", in, lo, n, err, want[0], want[1])
		}
	}
	for _, in := range []string{"4:2", "0:2", "2:", ":2", "1:65537"} {
		if _, _, err := launcher.ParseNNodes(in); launcher.ExitCode(err) != launcher.ExitUsage {
			t.Errorf("ParseNNodes(%q): %v, want a configuration error", in, err)
		}
	}
}
