package preload_test

import (
	"slices"
	"strings"
	"testing"

	"tpurun/internal/preload"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		python []string
		module bool
		target string
		args   []string
	}{
		{[]string{"python3", "train.py"}, []string{"python3"}, false, "train.py", []string{}},
		{[]string{"/usr/bin/python3", "-u", "train.py", "--lr", "3", "-m", "x"}, []string{"/usr/bin/python3", "-u"}, false, "train.py", []string{"--lr", "3", "-m", "x"}},
		{[]string{"python3.11", "-uB", "-OO", "t.py"}, []string{"python3.11", "-u", "-B", "-O", "-O"}, false, "t.py", []string{}},
		{[]string{"python", "-W", "ignore", "-Xdev", "-m", "pkg.train", "a"}, []string{"python", "-W", "ignore", "-Xdev"}, true, "pkg.train", []string{"a"}},
		{[]string{"python3", "-um", "tpurun.fn", "--args-json", "[]", "m:f"}, []string{"python3", "-u"}, true, "tpurun.fn", []string{"--args-json", "[]", "m:f"}},
		{[]string{"python3", "-mpkg"}, []string{"python3"}, true, "pkg", []string{}},
		{[]string{"python3", "--", "-weird.py"}, []string{"python3"}, false, "-weird.py", []string{}},
		{[]string{"python3", "--check-hash-based-pycs", "never", "t.py"}, []string{"python3", "--check-hash-based-pycs", "never"}, false, "t.py", []string{}},
		{[]string{"/opt/venv/bin/mypython", "t.py"}, []string{"/opt/venv/bin/mypython"}, false, "t.py", []string{}}, // PYTHON_EXEC
	} {
		c, err := preload.ParseCommand(tc.argv, "/opt/venv/bin/mypython")
		if err != nil {
			t.Errorf("%q: %v", tc.argv, err)
			continue
		}
		if !slices.Equal(c.Python, tc.python) || c.Module != tc.module || c.Target != tc.target || !slices.Equal(c.Args, tc.args) {
			t.Errorf("%q: got %+v, want python %q module %v target %q args %q", tc.argv, c, tc.python, tc.module, tc.target, tc.args)
		}
	}
}

func TestParseCommandRefusals(t *testing.T) {
	for argv, want := range map[string]string{
		"/bin/true":                       "is not a Python interpreter",
		"./train.sh x":                    "is not a Python interpreter",
		"python3 -c print(1)":             "-c runs a command string",
		"python3 -i t.py":                 "-i is interactive",
		"python3 -x t.py":                 "-x",
		"python3 -":                       "stdin",
		"python3":                         "names no program",
		"python3 -u":                      "names no program",
		"python3 -m":                      "-m needs a module name",
		"python3 -W":                      "-W needs a value",
		"python3 --version":               "prints something and exits",
		"python3 -V t.py":                 "-V is not supported",
		"python3 -q -J t.py":              "-J is not supported",
		"python3 -u -- -":                 "stdin",
		"python3.11-dbg -c pass":          "-c",
		"pythonista t.py":                 "is not a Python interpreter",
		"/usr/bin/env python3 x":          "is not a Python interpreter",
		"python3 --check-hash-based-pycs": "needs a value",
	} {
		_, err := preload.ParseCommand(strings.Fields(argv), "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one saying %q", argv, err, want)
		}
	}
}

// FuzzParseCommand: any command line is split or refused, never a panic, and a split one gives back its parts.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"python3 -u train.py", "python3 -um x", "python -W ignore -m a.b c", "python3 -", "python3 --"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv := strings.Split(s, " ")
		c, err := preload.ParseCommand(argv, "")
		if err != nil {
			return
		}
		if len(c.Python) == 0 || c.Python[0] != argv[0] || (!c.Module && c.Target == "-") {
			t.Fatalf("%q: %+v", argv, c)
		}
		if got := c.Argv(); got[0] != c.Target || len(got) != len(c.Args)+1 {
			t.Fatalf("%q: Argv %q", argv, got)
		}
	})
}
