package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
	"tpurun/internal/spec"
)

// torchFlags are torchrun's flags that tpurun accepts with the same meaning (the ones shared with tpurun's own,
// like --max-restarts or --log-dir, are registered with the others above), plus the container flags.
type torchFlags struct {
	standalone bool
	module     bool
	noPython   bool
	runPath    bool
	monitor    cli.Seconds
	shutdown   cli.Seconds
	signals    string
	logsSpec   string
	subreaper  bool     // --subreaper: accepted for compatibility, the default
	noReaper   bool     // --no-subreaper
	noEffect   []string // torchrun flags given that have no meaning under tpurun: each gets a one-line note
}

func addTorchFlags(fs *pflag.FlagSet) *torchFlags {
	t := &torchFlags{}
	fs.BoolVar(&t.standalone, "standalone", false, "torchrun's single-node mode: --nnodes 1 and no rendezvous backend")
	fs.BoolVarP(&t.module, "module", "m", false, "run PROGRAM as a Python module: $PYTHON_EXEC -u -m PROGRAM ARGS")
	fs.BoolVar(&t.noPython, "no-python", false, "run PROGRAM as is, even when it ends in .py")
	fs.BoolVar(&t.runPath, "run-path", false, "run PROGRAM as a Python script whatever its name: $PYTHON_EXEC -u PROGRAM ARGS")
	t.monitor = cli.Seconds(100 * time.Millisecond)
	fs.Var(&t.monitor, "monitor-interval", "accepted for torchrun compatibility (seconds or a duration); no effect: tpurun learns of exits at once")
	t.shutdown = cli.Seconds(spec.DefaultGrace) // shown by --help; applied only when given
	fs.Var(&t.shutdown, "shutdown-timeout", "torchrun's name for --grace (seconds or a duration): time between SIGTERM and SIGKILL")
	fs.StringVar(&t.signals, "signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "accepted for torchrun compatibility; tpurun forwards every catchable signal once to every worker group (see docs/CONTROL.md)")
	fs.BoolVar(&t.subreaper, "subreaper", false, "accepted for compatibility; no effect: tpurun is the child subreaper by default")
	for _, f := range [][2]string{
		{"start-method", "accepted for torchrun compatibility: every worker is a fresh exec of PROGRAM (torchrun's spawn)"},
		{"event-log-handler", "accepted for torchrun compatibility; tpurun logs events through its own logger"},
		{"numa-binding", "accepted for torchrun compatibility; not applied (workers are not pinned)"},
	} {
		fs.Var(&noteFlag{name: f[0], t: t}, f[0], f[1])
	}
	fs.StringVar(&t.logsSpec, "logs-specs", "", "torchrun's log layout plugin: only \"default\" (torchrun's own layout, which --log-dir writes)")
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
var aliases = [][]string{{"nprocs", "nproc-per-node"}, {"grace", "shutdown-timeout"}, {"node-addr", "local-addr"}}

// apply turns the torchrun-style choices into the launcher config: the Python command line (python: the workers'
// interpreter, cli.WorkersPython's), the grace period and the handled signals. args are PROGRAM ARGS....
func (t *torchFlags) apply(fs *pflag.FlagSet, cfg *spec.Spec, args []string, python string) error {
	if t.standalone {
		if _, n, err := cli.ParseNNodes(fs.Lookup("nnodes").Value.String()); err == nil && n > 1 {
			return &failure.ConfigError{Field: "--standalone", Value: "--nnodes " + fs.Lookup("nnodes").Value.String(),
				Hint: "runs one node on its own; for several nodes drop --standalone and give every node --rdzv-backend c10d --rdzv-endpoint HOST:PORT"}
		}
		for _, f := range []string{"nnodes=1", "rdzv-backend=", "rdzv-endpoint="} { // torchrun ignores the rdzv flags given with it
			name, v, _ := strings.Cut(f, "=")
			_ = fs.Set(name, v)
		}
	}
	if f := fs.Lookup("shutdown-timeout"); f.Changed {
		if fs.Lookup("grace").Changed && cfg.Grace != time.Duration(t.shutdown) {
			return &failure.ConfigError{Field: "--shutdown-timeout", Value: t.shutdown.String(),
				Hint: fmt.Sprintf("conflicts with --grace %s; give one of them", cfg.Grace)}
		}
		cfg.Grace = time.Duration(t.shutdown)
	}
	if f := map[bool]string{true: "--grace", false: "--shutdown-timeout"}[fs.Changed("grace")]; cfg.Grace <= 0 && fs.Changed(f[2:]) {
		return &failure.ConfigError{Field: failure.Named(f), Value: cfg.Grace.String(), Hint: "must be positive: the time between SIGTERM and SIGKILL (e.g. 1ms to kill at once)"}
	}
	if err := t.logsSpecs(); err != nil {
		return err
	}
	if _, err := cli.ParseSignals(t.signals); err != nil { // checked, as torchrun does; every signal is forwarded
		return &failure.ConfigError{Field: "--signals-to-handle", Value: t.signals, Hint: err.Error()}
	}
	if fs.Lookup("signals-to-handle").Changed {
		t.noEffect = append(t.noEffect, "--signals-to-handle="+t.signals+" (every catchable signal is forwarded)")
	}
	m := cli.PythonMode{Module: t.module, NoPython: t.noPython, RunPath: t.runPath, Python: python}
	if fs.Changed("python") {
		m.PythonFlag = "--python"
	}
	var err error
	if len(args) > 0 {
		cfg.Program, err = cli.PythonProgram(args, m)
	}
	return err
}

// logsSpecs checks --logs-specs: torchrun loads a torchrun.logs_specs entry point by that name; tpurun has one,
// "default", torchrun's own layout.
func (t *torchFlags) logsSpecs() error {
	if t.logsSpec != "" && t.logsSpec != "default" {
		return &failure.ConfigError{Field: "--logs-specs", Value: t.logsSpec,
			Hint: "tpurun writes torchrun's default log layout only: use --logs-specs default, or leave it out"}
	}
	return nil
}
