package cli_test

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/console"
	"tpurun/internal/failure"
)

// TestBindNamesTheFlagOfASetting: a setting bound beside its flag's definition is named by that flag, found from
// an error about it; a flag binds every setting it was bound to; a setting bound to no flag, or no setting, is
// named by none.
func TestBindNamesTheFlagOfASetting(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("grace", 0, "")
	cli.Bind(fs, "grace", failure.Grace)
	fs.String("nnodes", "1", "")
	cli.Bind(fs, "nnodes", failure.NNodes)
	cli.Bind(fs, "nnodes", failure.RendezvousNodes, failure.RendezvousMinNodes)
	fs.String("tee", "", "")
	err := fmt.Errorf("attempt 0: %w", &failure.ConfigError{Field: failure.Grace, Value: "-1s", Hint: "must not be negative"})
	for s, want := range map[failure.Setting]string{
		failure.SettingOf(err): "--grace", failure.RendezvousMinNodes: "--nnodes", failure.NNodes: "--nnodes",
		failure.Timeout: "", failure.SettingOf(errors.New("not about a setting")): "",
	} {
		if got := cli.FlagOf(fs, s); got != want {
			t.Errorf("FlagOf(%q) = %q, want %q", s, got, want)
		}
	}
	if got := cli.FlagOf(nil, failure.Grace); got != "" {
		t.Errorf("FlagOf(nil, grace) = %q", got)
	}
	want := map[string][]string{"grace": {"grace period"}, "nnodes": {"nnodes", "rendezvous node count", "rendezvous minimum node count"}}
	got := map[string][]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if ss := f.Annotations[cli.SettingKey]; len(ss) > 0 {
			got[f.Name] = ss
		}
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bound settings = %v, want %v", got, want)
	}
}

// TestBindRefusesAFlagThatIsNot: binding a name that is not a flag is a mistake of the program, found at once.
func TestBindRefusesAFlagThatIsNot(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Bind of an undefined flag did not panic")
		}
	}()
	cli.Bind(pflag.NewFlagSet("x", pflag.ContinueOnError), "grace", failure.Grace)
}

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
		if _, _, err := cli.ParseNNodes(in); failure.ExitCode(err) != failure.ExitUsage {
			t.Errorf("ParseNNodes(%q): %v, want a configuration error", in, err)
		}
	}
}

// flagSet is a few of tpurun's flags, as cmd/tpurun registers them ('_' spells '-').
func flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, n string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(n, "_", "-"))
	})
	fs.String("redirects", "", "")
	fs.StringP("tee", "t", "", "")
	fs.String("nproc-per-node", "", "")
	fs.Int("nprocs", 0, "")
	fs.String("rdzv-backend", "", "")
	fs.String("rdzv-endpoint", "", "")
	fs.String("rdzv-id", "", "")
	fs.String("rdzv-conf", "", "")
	fs.String("rdzv-token", "", "")
	fs.Bool("standalone", false, "")
	fs.BoolP("module", "m", false, "")
	fs.Int("max-restarts", 0, "")
	fs.Int64("max-result-bytes", 0, "")
	fs.String("hidden-root", "", "")
	_ = fs.MarkHidden("hidden-root")
	return fs
}

// TestExpand: a unique prefix of one of torchrun's flags is spelled out, as argparse takes it (--redirect=3,
// --nproc 4, --max_rest=1), only before PROGRAM and never in a flag's value; an ambiguous or unknown one is an
// error naming the choices or the nearest flag.
func TestExpand(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"--redirect=3 --tee 3 prog --redirect=3", "--redirects=3 --tee 3 prog --redirect=3"},
		{"--nproc 4 --max_rest=1 --stand -- --nproc", "--nproc-per-node 4 --max-restarts=1 --standalone -- --nproc"},
		{"--rdzv-id --redir prog", "--rdzv-id --redir prog"}, // --redir is --rdzv-id's value
		{"-t --redir -m --redir=1 prog", "-t --redir -m --redirects=1 prog"},
		{"--rdzv_endp=h:1 x", "--rdzv-endpoint=h:1 x"},
	} {
		got, err := cli.Expand(flagSet(), strings.Fields(c.in), cli.Flags)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for in, want := range map[string]string{
		"--rdzv=x prog":            "flag --rdzv is ambiguous: it could be --rdzv-backend, --rdzv-conf, --rdzv-endpoint, --rdzv-id; spell it out",
		"--nprocs-per-node=2 prog": "unknown flag: --nprocs-per-node; did you mean --nproc-per-node?",
		"--max-result 1 prog":      "unknown flag: --max-result; did you mean --max-result-bytes?",
		"--zzzzzzzz prog":          "unknown flag: --zzzzzzzz",
		"--hidden-rot x":           "unknown flag: --hidden-rot",
	} {
		_, err := cli.Expand(flagSet(), strings.Fields(in), cli.Flags)
		var ue *cli.UnknownFlagError
		if !errors.As(err, &ue) || err.Error() != want {
			t.Errorf("Expand(%q): %v, want %q", in, err, want)
		}
	}
}

// TestApplyPET: PET_<FLAG> fills what the command line did not set, not through an alias either, and a bad value
// names the variable.
func TestApplyPET(t *testing.T) {
	fs := flagSet()
	must(t, fs.Parse([]string{"--nprocs", "2"}))
	env := map[string]string{"PET_NPROC_PER_NODE": "4", "PET_MAX_RESTARTS": "3", "PET_RDZV_ID": ""}
	must(t, cli.ApplyPET(fs, func(k string) string { return env[k] }, [][]string{{"nprocs", "nproc-per-node"}}))
	if v := fs.Lookup("nproc-per-node").Value.String(); v != "" {
		t.Errorf("PET_NPROC_PER_NODE beat --nprocs: %q", v)
	}
	if v := fs.Lookup("max-restarts").Value.String(); v != "3" {
		t.Errorf("max-restarts %q, want PET_MAX_RESTARTS's 3", v)
	}
	env["PET_MAX_RESTARTS"] = "many"
	var pe *failure.ConfigError
	if err := cli.ApplyPET(flagSet(), func(k string) string { return env[k] }, nil); !errors.As(err, &pe) || pe.Field != "PET_MAX_RESTARTS" {
		t.Errorf("bad PET_MAX_RESTARTS: %v", err)
	}
}

// TestSeconds: torchrun's plain seconds and Go durations; negative refused; zero prints as no default.
func TestSeconds(t *testing.T) {
	for in, want := range map[string]time.Duration{"30": 30 * time.Second, "0.5": 500 * time.Millisecond, "1m": time.Minute, " 2 ": 2 * time.Second} {
		var s cli.Seconds
		if err := s.Set(in); err != nil || time.Duration(s) != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, time.Duration(s), err, want)
		}
	}
	for _, in := range []string{"-1", "soon", "-3s", ""} {
		var s cli.Seconds
		if err := s.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
	var zero cli.Seconds
	if zero.String() != "0" {
		t.Errorf("zero prints %q", zero.String())
	}
}

// FuzzExpand: any arguments: no panic, and a result never longer or shorter than the input, flags only rewritten
// to longer spellings of themselves.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"--redirect=3 prog", "--rdzv", "-t", "--", "--=x", "---x", "-", "--nproc\x00=1", "--max_rest"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, " ")
		got, err := cli.Expand(flagSet(), args, cli.Flags)
		if err != nil {
			return
		}
		if len(got) != len(args) {
			t.Fatalf("%q became %q", args, got)
		}
		for i := range got {
			if got[i] != args[i] && !strings.HasPrefix(got[i], "--") {
				t.Fatalf("%q rewritten to %q", args[i], got[i])
			}
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
