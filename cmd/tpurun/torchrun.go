package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"tpurun/launcher"
)

// torchFlags are torchrun's flags that tpurun accepts with the same meaning (the ones shared with tpurun's own,
// like --max-restarts or --log-dir, are registered in main.go and rdzv.go), plus the container flags.
type torchFlags struct {
	standalone bool
	module     bool
	noPython   bool
	runPath    bool
	monitor    seconds
	shutdown   seconds
	signals    string
	subreaper  bool // --subreaper: accepted for compatibility, the default
	noReaper   bool // --no-subreaper
	handled    []os.Signal
	noEffect   []string // torchrun flags given that have no meaning under tpurun: each gets a one-line note
}

func addTorchFlags(fs *pflag.FlagSet) *torchFlags {
	t := &torchFlags{}
	fs.BoolVar(&t.standalone, "standalone", false, "torchrun's single-node mode: --nnodes 1 and no rendezvous backend")
	fs.BoolVarP(&t.module, "module", "m", false, "run PROGRAM as a Python module: $PYTHON_EXEC -u -m PROGRAM ARGS")
	fs.BoolVar(&t.noPython, "no-python", false, "run PROGRAM as is, even when it ends in .py")
	fs.BoolVar(&t.runPath, "run-path", false, "run PROGRAM as a Python script whatever its name: $PYTHON_EXEC -u PROGRAM ARGS")
	t.monitor = seconds(100 * time.Millisecond)
	fs.Var(&t.monitor, "monitor-interval", "accepted for torchrun compatibility (seconds or a duration); no effect: tpurun learns of exits at once")
	fs.Var(&t.shutdown, "shutdown-timeout", "torchrun's name for --grace (seconds or a duration): time between SIGTERM and SIGKILL")
	fs.StringVar(&t.signals, "signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "accepted for torchrun compatibility; tpurun forwards every catchable signal once to every worker group (see docs/CONTROL.md)")
	fs.BoolVar(&t.subreaper, "subreaper", false, "accepted for compatibility; no effect: tpurun is the child subreaper by default")
	for _, f := range [][2]string{
		{"start-method", "accepted for torchrun compatibility: every worker is a fresh exec of PROGRAM (torchrun's spawn)"},
		{"event-log-handler", "accepted for torchrun compatibility; tpurun logs events through its own logger"},
		{"logs-specs", "accepted for torchrun compatibility; tpurun writes torchrun's default log layout"},
		{"numa-binding", "accepted for torchrun compatibility; not applied (workers are not pinned)"},
	} {
		fs.Var(&noteFlag{name: f[0], t: t}, f[0], f[1])
	}
	fs.BoolVar(&t.noReaper, "no-subreaper", false, "do not become the child subreaper (ignored as PID 1): orphans go to PID 1 and the orphan sweep scans every process's environment for the run id")
	return t
}

// noteFlag is a torchrun flag that tpurun accepts without a meaning; giving it records a note.
type noteFlag struct {
	name, v string
	t       *torchFlags
}

func (f *noteFlag) Set(v string) error {
	f.v = v
	f.t.noEffect = append(f.t.noEffect, "--"+f.name+"="+v)
	return nil
}
func (f *noteFlag) String() string { return f.v }
func (f *noteFlag) Type() string   { return "string" }

// aliases are the groups of flags that spell one setting: a flag given on the command line also keeps the PET_*
// variables of its aliases from overriding it (PET_NPROC_PER_NODE does not beat --nprocs).
var aliases = [][]string{{"nprocs", "nproc-per-node"}, {"grace", "shutdown-timeout"}}

// petEnv gives every flag not set on the command line, nor through an alias, its value from torchrun's
// PET_<FLAG> environment variable (PET_NPROC_PER_NODE, PET_MAX_RESTARTS, ...): the command line beats the env.
func petEnv(fs *pflag.FlagSet, getenv func(string) string) error {
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
			err = &launcher.ConfigError{Field: name, Value: v, Hint: fmt.Sprintf("not a valid --%s (%v); fix or unset it", f.Name, e)}
		}
	})
	return err
}

// apply turns the torchrun-style choices into the launcher config: the Python command line, the grace period
// and the handled signals. args are the positional arguments (PROGRAM ARGS...).
func (t *torchFlags) apply(fs *pflag.FlagSet, cfg *launcher.Spec, args []string, getenv func(string) string) error {
	if t.standalone {
		_ = fs.Set("nnodes", "1")
		_ = fs.Set("rdzv-backend", "")
	}
	if f := fs.Lookup("shutdown-timeout"); f != nil && f.Changed {
		if fs.Lookup("grace").Changed && cfg.Grace != time.Duration(t.shutdown) {
			return &launcher.ConfigError{Field: "--shutdown-timeout", Value: t.shutdown.String(),
				Hint: fmt.Sprintf("conflicts with --grace %s; give one of them", cfg.Grace)}
		}
		cfg.Grace = time.Duration(t.shutdown)
	}
	sigs, err := launcher.ParseSignals(t.signals)
	if err != nil {
		return &launcher.ConfigError{Field: "--signals-to-handle", Value: t.signals, Hint: err.Error()}
	}
	t.handled = sigs
	if fs.Lookup("signals-to-handle").Changed {
		t.noEffect = append(t.noEffect, "--signals-to-handle="+t.signals+" (every catchable signal is forwarded)")
	}
	if len(args) > 0 {
		cfg.Program = launcher.PythonCommand(args, t.module, t.noPython, t.runPath, getenv("PYTHON_EXEC"))
	}
	if t.noPython && (t.module || t.runPath) {
		return &launcher.ConfigError{Field: "--no-python", Value: "true", Hint: "cannot be combined with -m/--module or --run-path"}
	}
	return nil
}

// reaper reports whether tpurun runs the one reaper: always as PID 1; otherwise as the child subreaper unless
// --no-subreaper (orphans then go to PID 1 and the sweep scans every process's environment for the run's tag).
func (t *torchFlags) reaper() bool { return os.Getpid() == 1 || !t.noReaper }

// seconds is a duration flag that also takes torchrun's plain (fractional) seconds: "30", "0.1" or "1m".
type seconds time.Duration

func (s *seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f < 1e9 {
		*s = seconds(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither seconds (30, 0.5) nor a duration (30s, 1m)", v)
	}
	*s = seconds(d)
	return nil
}

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Type() string { return "seconds" }
