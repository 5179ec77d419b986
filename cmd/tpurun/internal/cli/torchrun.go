package cli

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
)

// Flags are torchrun's long flags (torch/distributed/run.py, 2.x), in tpurun's '-' spelling: the names an
// abbreviation may stand for, as argparse resolves a prefix among its own options only.
var Flags = []string{
	"nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "standalone", "max-restarts",
	"monitor-interval", "start-method", "event-log-handler", "role", "module", "no-python", "run-path", "log-dir",
	"redirects", "tee", "local-ranks-filter", "node-rank", "master-addr", "master-port", "local-addr", "logs-specs",
	"numa-binding", "signals-to-handle", "virtual-local-rank", "help",
}

// UnknownFlagError is a flag that is neither one of the flag set's nor a unique prefix of one of torchrun's.
type UnknownFlagError struct {
	Flag    string   // as given, without its value
	Suggest string   // the nearest known flag ("--nproc-per-node"), if any is near
	Matches []string // an ambiguous prefix: every torchrun flag it could stand for
}

func (e *UnknownFlagError) Error() string {
	switch {
	case len(e.Matches) > 0:
		return fmt.Sprintf("flag %s is ambiguous: it could be --%s; spell it out", e.Flag, strings.Join(e.Matches, ", --"))
	case e.Suggest != "":
		return fmt.Sprintf("unknown flag: %s; did you mean %s?", e.Flag, e.Suggest)
	}
	return fmt.Sprintf("unknown flag: %s", e.Flag)
}

// Expand returns args with every long flag before PROGRAM that fs does not know, but that is a unique prefix of one
// of names (torchrun's Flags), spelled in full. It stops at "--" or at the first positional argument, skipping the
// values of flags that take one. A long flag that is neither known nor such a prefix is an *UnknownFlagError.
func Expand(fs *pflag.FlagSet, args []string, names []string) ([]string, error) {
	out := append([]string(nil), args...)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if !strings.HasPrefix(a, "--") { // shorthands: -m, -r 3, -t3, -v
			if f := fs.ShorthandLookup(a[1:2]); f != nil && f.NoOptDefVal == "" && len(a) == 2 {
				i++
			}
			continue
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		f := fs.Lookup(name)
		if f == nil {
			full, err := resolve(fs, name, names)
			if err != nil {
				return nil, err
			}
			f = fs.Lookup(full)
			out[i] = "--" + full
			if hasVal {
				out[i] += "=" + val
			}
		}
		if !hasVal && f.NoOptDefVal == "" {
			i++ // the flag's value is the next argument
		}
	}
	return out, nil
}

// resolve finds the one flag of names that name abbreviates, or explains why there is none.
func resolve(fs *pflag.FlagSet, name string, names []string) (string, error) {
	norm := strings.ReplaceAll(name, "_", "-")
	var matches []string
	for _, n := range names {
		if strings.HasPrefix(n, norm) && norm != "" && fs.Lookup(n) != nil {
			matches = append(matches, n)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", &UnknownFlagError{Flag: "--" + name, Suggest: Suggest(fs, norm)}
	}
	sort.Strings(matches)
	return "", &UnknownFlagError{Flag: "--" + name, Matches: matches}
}

// Suggest is the visible flag of fs nearest to name ("--nproc-per-node" for "nprocs-per-node"), or "" when none is
// near: within an edit distance of a third of the name (at least 2), or one the name starts with or cuts short.
func Suggest(fs *pflag.FlagSet, name string) string {
	name = strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-")
	best, bestD := "", max(2, len(name)/3)+1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := distance(name, f.Name)
		if len(name) >= 4 && len(f.Name) >= 4 && (strings.HasPrefix(name, f.Name) || strings.HasPrefix(f.Name, name)) {
			d = min(d, 1) // one is the other cut short: --max-result for --max-result-bytes
		}
		if d < bestD || (d == bestD && best != "" && f.Name < best) {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return "--" + best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ApplyPET gives every flag of fs that was not set on the command line, nor through one of its aliases (groups of
// flags that spell one setting), its value from torchrun's PET_<FLAG> variable (PET_NPROC_PER_NODE,
// PET_MAX_RESTARTS, ...): the command line beats the environment. An empty variable counts as unset; a value the
// flag refuses is a *failure.ConfigError about the variable.
func ApplyPET(fs *pflag.FlagSet, getenv func(string) string, aliases [][]string) error {
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { given[f.Name] = true }) // before any PET_* is applied
	for _, group := range aliases {
		for _, name := range group {
			if given[name] {
				for _, alias := range group {
					given[alias] = true
				}
				break
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || given[f.Name] || f.Name == "help" {
			return
		}
		name := "PET_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(name)
		if v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = &failure.ConfigError{Field: failure.Named(name), Value: v,
				Hint: fmt.Sprintf("not a valid --%s (%v); fix or unset it", f.Name, e)}
		}
	})
	return err
}

// Seconds is a duration flag that also takes torchrun's plain (fractional) seconds: "30", "0.1" or "1m". Set
// refuses negative values; whether 0 is allowed is the caller's to say (Positive).
type Seconds time.Duration

func (s *Seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f < 1e9 {
		*s = Seconds(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither seconds (30, 0.5) nor a duration (30s, 1m)", v)
	}
	*s = Seconds(d)
	return nil
}

// String is the duration ("5m0s"), or "0" for none, which --help does not print as a default.
func (s *Seconds) String() string {
	if *s == 0 {
		return "0"
	}
	return time.Duration(*s).String()
}

func (s *Seconds) Type() string { return "seconds" }

// PythonMode is how torchrun's flags say to run PROGRAM: -m, --no-python, --run-path, and the interpreter.
type PythonMode struct {
	Module, NoPython, RunPath bool
	Python                    string // the interpreter (WorkersPython's Path); "" is python3 from PATH
	PythonFlag                string // the flag that named Python ("--python"), "" when it came from the environment
}

// WorkersPython is the workers' interpreter for a tpurun command line whose --python is flag ("" when not given):
// spec.ResolvePython with this binary as the tpurun whose beside-it python3 is the Python it was installed into.
func WorkersPython(flag string, getenv func(string) string) spec.Python {
	exe, _ := os.Executable() // "" when unknown
	return spec.ResolvePython(flag, getenv, exe)
}

// PythonProgram is the command line for args (PROGRAM ARGS...) under m, as torchrun builds it: PROGRAM.py, -m and
// --run-path under the interpreter with -u (--run-path wins over --no-python), anything else as is. torchrun runs
// its own interpreter (sys.executable); tpurun runs m.Python (WorkersPython), else python3 from PATH. It refuses
// what torchrun refuses (--no-python with -m), an interpreter flag that would not apply (a PROGRAM that runs as is
// would silently ignore it), and a script that is not there (a *failure.ProgramError, exit 127: torchrun starts
// every worker, and again on each restart, to have Python say "can't open file").
func PythonProgram(args []string, m PythonMode) ([]string, error) {
	if m.NoPython && m.Module {
		return nil, &failure.ConfigError{Field: "--no-python", Value: "true", Hint: "cannot be combined with -m/--module (as under torchrun): drop one of them"}
	}
	noPython := m.NoPython && !m.RunPath
	cmd := pythonCommand(args, m.Module, noPython, m.RunPath, m.Python)
	if len(cmd) > len(args) && !m.Module { // PROGRAM.py or --run-path, under the interpreter: the script must be there
		if _, err := os.Stat(args[0]); err != nil { // before any worker starts, as a missing PROGRAM: 127, no restart
			return nil, &failure.ProgramError{Program: args[0], Err: err}
		}
	}
	if m.PythonFlag != "" && len(args) > 0 && cmd[0] != m.Python {
		return nil, &failure.ConfigError{Field: failure.Named(m.PythonFlag), Value: m.Python, Hint: fmt.Sprintf("applies to a PROGRAM ending in .py, to -m and --run-path "+
			"(and --fn); PROGRAM %q runs as is: drop %s, or name the script, e.g. tpurun %s %s train.py", args[0], m.PythonFlag, m.PythonFlag, m.Python)}
	}
	return cmd, nil
}

// pythonCommand is the command line torchrun would run for args: PROGRAM.py and runPath run under python -u
// (python is WorkersPython's, or python3), module as -m, noPython and everything else as is.
func pythonCommand(args []string, module, noPython, runPath bool, python string) []string {
	if noPython || len(args) == 0 {
		return args
	}
	if python == "" {
		python = "python3"
	}
	switch {
	case module:
		return append([]string{python, "-u", "-m"}, args...)
	case runPath || strings.HasSuffix(args[0], ".py"):
		return append([]string{python, "-u"}, args...)
	}
	return args
}
