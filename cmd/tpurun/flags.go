package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/pymodule"
	"tpurun/internal/spec"
	"tpurun/internal/workerenv"
	"tpurun/launcher"
	"tpurun/worker"
)

type options struct {
	flags          *pflag.FlagSet // every flag, bound to the settings it sets (cli.Bind)
	spec           spec.Spec
	dev            *cli.Device // --device, --nprocs and the other topology flags: detection runs in the launcher
	rdzv           *rdzvFlags  // --nnodes, --node-rank, --rdzv-*: multi-host runs (rdzvFlags, below)
	tr             *torchFlags // torchrun's remaining flags and the container flags (torchFlags, below)
	json           bool        // --json (or --json-frames): the results document on stdout
	jsonFrames     bool        // --json-frames: pickled values as frames before it
	jsonFD         int         // --json-fd: the document on this inherited descriptor instead of stdout; -1: stdout
	exitWithParent bool
	statusAddr     string
	statusRemote   bool
	logFormat      string
	verbose        bool
	quiet          bool
}

func parse(args []string, stdout io.Writer) (*options, error) {
	o, fs, raw := newFlags()
	args, err := cli.Expand(fs, args, cli.Flags) // argparse's unique prefixes: --redirect=3
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := cli.ApplyPET(fs, os.Getenv, aliases); err != nil { // torchrun's PET_<FLAG> defaults
		return nil, err
	}
	if raw.help || raw.version || raw.pyPath {
		return nil, inform(stdout, fs, raw)
	}
	if err := o.finish(fs, raw); err != nil {
		return nil, err
	}
	return o, nil
}

// rawFlags are the flags parse turns into the Spec once they are parsed, and those that ask for information.
type rawFlags struct {
	redirects, tee, filter, stdin, preload string
	fn                                     *spec.FnSpec
	help, version, pyPath                  bool
}

// newFlags registers tpurun's flags: into the options' Spec where a flag sets a field as it is, else into raw.
func newFlags() (*options, *pflag.FlagSet, *rawFlags) {
	o, raw := &options{}, &rawFlags{}
	fs := pflag.NewFlagSet("tpurun", pflag.ContinueOnError)
	o.flags = fs
	fs.SetOutput(io.Discard)
	fs.SetInterspersed(false) // everything after PROGRAM belongs to PROGRAM
	fs.SetNormalizeFunc(cli.Dashes)
	o.dev = cli.AddDevice(fs)
	raw.fn = addResultFlags(fs, &o.spec, &o.json, &o.jsonFrames)
	fs.IntVar(&o.jsonFD, "json-fd", -1, "--json's document (and --json-frames's frames) on this file descriptor, inherited from the caller, instead of stdout: the workers' stdout stays on stdout (what tpurun.spawn uses)")
	fs.DurationVar(&o.spec.Grace, "grace", spec.DefaultGrace, "time between SIGTERM and SIGKILL when stopping workers")
	cli.Bind(fs, "grace", failure.Grace)
	fs.DurationVar(&o.spec.Timeout, "timeout", 0, "stop the run after this long and exit 124 (0: no limit)")
	cli.Bind(fs, "timeout", failure.Timeout)
	fs.IntVar(&o.spec.MaxRestarts, "max-restarts", 0, "restart the whole group up to this many times after a failure")
	cli.Bind(fs, "max-restarts", failure.MaxRestarts)
	fs.StringVar(&o.spec.LogDir, "log-dir", "", "write DIR/<run-id>_<random>/attempt_<n>/<local-rank>/{stdout,stderr}.log")
	cli.Bind(fs, "log-dir", failure.LogDir)
	fs.StringVarP(&raw.redirects, "redirects", "r", "", "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank \"0:1,1:2\"")
	fs.StringVarP(&raw.tee, "tee", "t", "", "streams sent to the console and the log files (same syntax as --redirects)")
	fs.StringVar(&raw.filter, "local-ranks-filter", "", "show only these local ranks on the console, e.g. 0 or 0,2-3")
	fs.StringVar(&raw.stdin, "stdin", "all", "which workers read tpurun's stdin: all (as torchrun), 0 (local rank 0), none (/dev/null); a terminal goes to local rank 0 only")
	cli.Bind(fs, "stdin", failure.Stdin)
	fs.StringVar(&o.spec.LogPrefix, "log-prefix", "", "prefix of each line of worker output, e.g. '[{rank}] ': {rank} {local_rank} {node} {role} (or torchrun's $rank...); default none, as torchrun (with --tee, torchrun's '"+console.TeePrefix+"')")
	fs.StringVar(&o.logFormat, "log-format", "console", "format of tpurun's own logs: console or json")
	fs.StringVar(&o.spec.RunID, "run-id", "", "run id (TORCHELASTIC_RUN_ID, TPURUN_RUN_ID); default random")
	cli.Bind(fs, "run-id", failure.RunID)
	fs.StringVar(&o.spec.MasterAddr, "master-addr", spec.DefaultMasterAddr, "MASTER_ADDR given to the workers")
	cli.Bind(fs, "master-addr", failure.MasterAddr)
	fs.IntVar(&o.spec.MasterPort, "master-port", 0, "MASTER_PORT given to the workers (0: a free port)")
	cli.Bind(fs, "master-port", failure.MasterPort)
	fs.StringVar(&o.spec.Role, "role", workerenv.DefaultRole, "ROLE_NAME given to the workers")
	cli.Bind(fs, "role", failure.Role)
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "debug logs")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "tpurun's own lines only when something fails: its warnings and errors, the summary of an attempt that did not end well (tpurun.spawn and run pass it)")
	fs.BoolVarP(&raw.help, "help", "h", false, "show this help")
	fs.BoolVar(&raw.version, "version", false, "print the version of tpurun and of its Python module")
	fs.BoolVar(&raw.pyPath, "python-path", false, "install the tpurun Python module (once, in the user's cache) and print the directory to put on PYTHONPATH")
	fs.BoolVar(&o.exitWithParent, "exit-with-parent", false, "stop as on SIGTERM when the process that started tpurun exits, not a thread of it (tpurun.run and spawn set it)")
	o.tr = addTorchFlags(fs)
	fs.StringVar(&o.statusAddr, "status-addr", "", "serve /healthz and /metrics (Prometheus) on HOST:PORT, loopback only (port 0 picks one; the address is printed on stderr)")
	cli.Bind(fs, "status-addr", failure.StatusAddr)
	fs.StringVar(&raw.preload, "preload", os.Getenv(worker.EnvPreload), "Python modules (comma-separated, e.g. torch) imported once by one interpreter that proves it holds no thread or device, then forks every worker and restart from it (env TPURUN_PRELOAD)")
	fs.BoolVar(&o.statusRemote, "status-allow-remote", false, "allow a non-loopback --status-addr (the endpoint has no authentication)")
	o.rdzv = addRdzvFlags(fs)
	return o, fs, raw
}

// inform answers --help, --version and --python-path; pflag.ErrHelp says it did (exit 0).
func inform(stdout io.Writer, fs *pflag.FlagSet, raw *rawFlags) error {
	switch {
	case raw.help:
		usage(stdout, fs)
	case raw.version:
		fmt.Fprintf(stdout, "tpurun %s (%s)\n", launcher.Version, runtime.Version())
	default:
		// tpurun.spawn in the caller finds this binary; the cache directory is the user's to fix or move
		exe, _ := os.Executable() // "" when it cannot be found: no binary is recorded
		dir, err := pymodule.Path("", exe)
		if err != nil {
			return &failure.ConfigError{Field: "--python-path", Value: err.Error(), Hint: "set XDG_CACHE_HOME to a directory you can " +
				"write (XDG_CACHE_HOME=/tmp/$USER-cache tpurun --python-path), or install the module: pip install <tpurun checkout>/worker/python"}
		}
		fmt.Fprintln(stdout, dir)
	}
	return pflag.ErrHelp
}

// finish turns the parsed flags into the Spec: the program or function, torchrun's Python flags, the streams.
func (o *options) finish(fs *pflag.FlagSet, raw *rawFlags) error {
	fn := raw.fn
	if fn.Target == "" && fn.ArgsJSON != "" {
		return &failure.ConfigError{Field: "--fn-args-json", Value: fn.ArgsJSON, Hint: "only with --fn package.module:function"}
	}
	if n := o.spec.Results.MaxFrameBytes; fs.Changed("max-result-bytes") && n <= 0 {
		return &failure.ConfigError{Field: "--max-result-bytes", Value: strconv.FormatInt(n, 10), Hint: "must be at least 1 byte"}
	}
	switch {
	case fn.Target != "":
		fn.Args = fs.Args()
		o.spec.Fn = fn
	case len(fs.Args()) == 0:
		return errors.New("no PROGRAM given; usage: tpurun [flags] [--] PROGRAM [ARGS...]")
	default:
		o.spec.Program = fs.Args()
	}
	fn.Python = cli.WorkersPython(fn.Python, os.Getenv).Path // also --fn's: the host alone knows no tpurun binary
	if err := o.tr.apply(fs, &o.spec, o.spec.Program, fn.Python); err != nil {
		return err
	}
	o.spec.Preload = cli.ParseList(raw.preload)
	if err := o.streams(raw.redirects, raw.tee, raw.filter, raw.stdin); err != nil {
		return err
	}
	if !fs.Changed("log-prefix") {
		switch t := os.Getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); {
		case t != "":
			o.spec.LogPrefix = t // torchrun's template ($rank, $local_rank, $role_name); --log-prefix wins
		case o.spec.Tee.Any():
			o.spec.LogPrefix = console.TeePrefix // torchrun prefixes what it tees: [default0]:
		}
	}
	o.spec.RawOutput = o.spec.LogPrefix == "" // the bytes as the workers wrote them, as torchrun shows them
	if o.logFormat != "console" && o.logFormat != "json" {
		return &failure.ConfigError{Field: "--log-format", Value: o.logFormat, Hint: "use console or json"}
	}
	return o.documentFlags(fs.Changed("json-fd"))
}

// streams parses the flags that say where the workers' streams go and which of them read stdin.
func (o *options) streams(redirects, tee, filter, stdin string) error {
	var err error
	if o.spec.Redirects, err = cli.ParseStdSpec("--redirects", redirects); err != nil {
		return err
	}
	if o.spec.Tee, err = cli.ParseStdSpec("--tee", tee); err != nil {
		return err
	}
	if o.spec.LocalRanksFilter, err = cli.ParseRanks("--local-ranks-filter", filter); err != nil {
		return err
	}
	o.spec.StdinTo, err = cli.ParseStdinMode(stdin)
	return err
}

// usageText is --help's text: the flags and the exit-code table fill in its two %s.
//
//go:embed usage.txt
var usageText string

func usage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, usageText, fs.FlagUsages(), failure.ExitHelp)
}

// addResultFlags registers the result-contract flags: --fn, --fn-args-json, --python (into the returned FnSpec,
// used when --fn is given), --expect-results, --max-result-bytes, --results (into spec.Results), --json and
// --json-frames.
func addResultFlags(fs *pflag.FlagSet, s *spec.Spec, json, frames *bool) *spec.FnSpec {
	f := &spec.FnSpec{}
	fs.StringVar(&f.Target, "fn", "", "function mode: run package.module:function(index, *args) in every worker (Python) and collect its return value; positional ARGS are passed as strings")
	cli.Bind(fs, "fn", failure.Function)
	fs.StringVar(&f.ArgsJSON, "fn-args-json", "", "JSON list of the first arguments after index for --fn, e.g. '[3, {\"lr\": 0.1}]'")
	cli.Bind(fs, "fn-args-json", failure.FunctionArgs)
	fs.StringVar(&f.Python, "python", "", "Python interpreter for --fn, PROGRAM.py, -m and --run-path (default $PYTHON_EXEC, else tpurun.spawn's caller, else the python3 beside tpurun, else python3 from PATH)")
	fs.BoolVar(&s.Results.Required, "expect-results", false, "require one result per replica from plain programs too (implied by --fn)")
	// not given (0): the limit is left to its owner, the frame decoder (worker.DefaultMaxPayload); help shows it
	fs.Int64Var(&s.Results.MaxFrameBytes, "max-result-bytes", 0,
		fmt.Sprintf("largest accepted result frame payload in bytes (default %d)", worker.DefaultMaxPayload))
	cli.Bind(fs, "max-result-bytes", failure.MaxResultBytes)
	fs.StringVar(&s.Results.File, "results", "", "write the results document (JSON) to FILE atomically, also when the run fails")
	cli.Bind(fs, "results", failure.ResultsFile)
	fs.BoolVar(json, "json", false, "print the results document as the last thing on stdout; worker and tpurun output go to stderr")
	fs.BoolVar(frames, "json-frames", false, "--json, with each pickled value raw before the document, as a result frame (worker/PROTOCOL.md): what tpurun.spawn reads")
	return f
}
