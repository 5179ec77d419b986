package cli_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
)

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
	var pe *cli.PETError
	if err := cli.ApplyPET(flagSet(), func(k string) string { return env[k] }, nil); !errors.As(err, &pe) || pe.Var != "PET_MAX_RESTARTS" {
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
