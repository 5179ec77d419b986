// Command tpurun starts one worker process per device on this host with the per-rank environment that
// torchrun, PyTorch/XLA and JAX programs expect, supervises them and exits with the first failure's code.
//
//	tpurun [flags] [--] PROGRAM [ARGS...]
package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/cmd/tpurun/internal/status"
	"tpurun/cmd/tpurun/internal/summary"
	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/setting"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/internal/workerenv"
	"tpurun/launcher"
	"tpurun/worker"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) (code int) {
	if code, ok := subcommand(args, stdout, stderr); ok {
		return code
	}
	o, err := parse(args, stdout)
	if err != nil {
		return parseFailed(stderr, err)
	}
	req, _ := o.dev.Request()
	attempt.ReserveAhead(req.NProcs) // first: the descriptor table's growth overlaps everything below
	// Every catchable signal, forwarded or acted on, never a dump; caught here, before tpurun writes anything or
	// answers on --status-addr (a signal meanwhile waits for Run, which stops at once), not by Run, and never
	// released (the process exits after the last flush): after the run a stop signal still bounds the last writes,
	// a closed stdout is still EPIPE, not SIGPIPE, and no signal kills tpurun by its default action. Releasing them
	// cost as much as catching them: a round trip to the runtime's signal thread each, 1.4 ms of a run of one worker.
	sigs, _ := stop.NotifySignals()
	// One writer per open file for everything tpurun writes (its logs, the workers' lines, stdout and stderr when
	// they are one file): lines never splice, a slow reader slows the workers, and logging never waits.
	outc, errc := console.NewConsoles(stdout, stderr)
	f := failer{w: errc, other: outc, flags: o.flags}
	docc := o.documentConsole(outc)
	if docc == outc && o.json {
		f.other = nil // stdout carries only the results document
	}
	defer func() { // the last flush: a stop signal bounds it (see report)
		if err := console.Flush(outc, errc, docc); err != nil && code == 0 { // --json into a full disk, say
			code = f.fail(err)
			_ = console.Flush(outc, errc, docc)
		}
	}()
	log, err := console.NewLogger(o.logFormat, console.Level(o.verbose, o.quiet), errc.LogWriter())
	if err != nil {
		fmt.Fprintf(errc, "tpurun: %v\n", err)
		return exitcode.Usage
	}
	if o.logFormat == "json" { // every line tpurun writes on stderr is a record: the summaries and the last line too
		f.log = log
	}
	if o.jsonFrames && docc == errc { // raw frames among the workers' lines could not be found again
		return f.fail(&failure.ConfigError{Field: "--json-frames", Value: "true", Hint: "stdout and stderr are one file (2>&1): give stdout a file or pipe of its own, or use --json"})
	}
	if err := o.describe(outc, errc, log); err != nil {
		return f.fail(err)
	}
	if stopReaping := o.reap(log); stopReaping != nil {
		defer stopReaping() // after the last line: the reaper's count of the orphans it reaped comes after it
	}
	stop, err := serveStatus(o, &o.spec, f, log)
	if err != nil {
		return f.fail(err)
	}
	defer stop()
	o.spec.Signals = sigs
	sp := summary.NewPrinter(errc.LogWriter(), f.log, o.quiet) // each attempt's summary as it ends
	o.spec.Observers = append(o.spec.Observers, sp)
	return report(o, &o.spec, sp, f, consoles{out: outc, err: errc, doc: docc})
}

// parseFailed answers a command line that was not run: 0 after --help (and --version, --python-path), else the
// error and its code.
func parseFailed(stderr io.Writer, err error) int {
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	var pe *failure.ProgramError
	if errors.As(err, &pe) { // PROGRAM.py or --run-path not there: not a usage error, a missing program (127)
		return cli.Exit(stderr, "", err)
	}
	fmt.Fprintf(stderr, "tpurun: %v\nRun 'tpurun --help' for usage.\n", err)
	if errors.Is(err, failure.ErrInternal) {
		return exitcode.Internal
	}
	return exitcode.Usage
}

// describe completes the Spec of the run with what needs the consoles and the logger: its streams, detection's
// options, the rendezvous, the reaping; --exit-with-parent first.
func (o *options) describe(stdout, stderr io.Writer, log *zap.Logger) error {
	if o.exitWithParent {
		if err := stop.ExitWithParent(); err != nil {
			return err
		}
	}
	if o.spec.Env == nil {
		o.spec.Env = os.Environ() // the workers' environment: as inherited, before tpurun's own TMPDIR below
	}
	if w := ownTmpdir(); w != "" {
		log.Warn(w)
	}
	for _, f := range o.tr.noEffect {
		log.Info("torchrun flag accepted with no effect under tpurun (see --help)", zap.String("flag", f))
	}
	spec := &o.spec
	spec.Logger = log
	spec.Stdout, spec.Stderr = stdout, stderr
	spec.Stdin = os.Stdin // the workers read it, as torchrun's do (--stdin)
	if spec.Results.Document = o.json; o.json && o.jsonFD < 0 {
		spec.Stdout = stderr // stdout carries only the results document: on every node of a multi-host job
	}
	var err error
	if spec.Detect, err = o.dev.Options(log); err != nil {
		return err
	}
	spec.Request, spec.PerCPU = o.dev.Request()
	spec.Force = o.dev.Force
	var notes []string
	if spec.Rendezvous, notes, err = o.rdzv.spec(spec.RunID, spec.MasterAddr, &spec.MasterPort); err != nil {
		return err
	}
	for _, n := range notes {
		log.Warn(n)
	}
	// tpurun runs nothing but the job: with the reaper (reap), the orphan sweep walks its whole subtree.
	spec.NoReaper, spec.SweepSubtree = o.tr.noReaper, true
	return nil
}

// reap makes tpurun reap for the whole run (PID 1 always does, the child subreaper unless --no-subreaper), as Run
// would for its own length; stop is nil when tpurun does not reap, or cannot (then the sweep goes by environment).
func (o *options) reap(log *zap.Logger) (stop func()) {
	if o.tr.noReaper && os.Getpid() != 1 {
		return nil
	}
	stop, err := proc.Reap(log.Named("reaper"))
	if err != nil {
		log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		o.spec.NoReaper = true
	}
	return stop
}

// serveStatus serves --status-addr's /healthz and /metrics for the run, and says where; stop ends it.
func serveStatus(o *options, spec *launcher.Spec, f failer, log *zap.Logger) (stop func(), err error) {
	if o.statusAddr == "" {
		return func() {}, nil
	}
	mon := status.NewMonitor(spec.MaxRestarts)
	addr, stop, err := mon.Serve(context.Background(), o.statusAddr, o.statusRemote, log)
	if err != nil {
		return nil, err
	}
	if msg := "status on http://" + addr.String() + "/metrics and /healthz"; f.log != nil {
		f.log.Info(msg)
	} else {
		fmt.Fprintf(f.w, "tpurun: %s\n", msg)
	}
	spec.Observers = append(spec.Observers, mon)
	return stop, nil
}

// report runs the job and prints its summary (and --json's document); it returns the exit code.
func report(o *options, spec *launcher.Spec, sp *summary.Printer, f failer, c consoles) int {
	rep, err := launcher.Run(context.Background(), *spec)
	stop.HurryOnStop(spec.Signals, c.out, c.err, c.doc) // from here to the exit
	stderr := c.err
	if rep != nil {
		sp.Finish(rep)
		if doc := rep.Results; doc != nil {
			var ce *failure.ConfigError
			if !errors.As(err, &ce) {
				summary.WriteResults(stderr, f.log, doc, !o.json) // --json: the document has the tracebacks
			}
			if o.json {
				encode := doc.Encode
				if o.jsonFrames {
					encode = doc.EncodeFramed
				}
				if jerr := printDocument(encode, c.doc, stderr); jerr != nil {
					return f.fail(fmt.Errorf("%w: results document: %w", failure.ErrInternal, jerr))
				}
			}
		}
	}
	return f.fail(err)
}

// failer prints the error a run ends with on tpurun's stderr: a text line, or with --log-format json (log set) a log
// record; on its stdout, as a text line, when stderr has failed (its reader went away). A configuration error
// names the flag bound to the setting it is about (cli.Bind, beside each flag's definition).
type failer struct {
	w     *console.Console
	other *console.Console // stdout
	log   *zap.Logger
	flags *pflag.FlagSet // tpurun's flags, each bound to the settings it sets
}

func (f failer) fail(err error) int {
	code := failure.ExitCode(err)
	flag := cli.FlagOf(f.flags, setting.Of(err))
	if err != nil && f.w.Err() != nil && f.other != nil {
		return cli.Exit(f.other, flag, err) // the reason on the other stream
	}
	if f.log == nil || err == nil {
		return cli.Exit(f.w, flag, err)
	}
	f.log.Error("tpurun exits", zap.Int("exit_code", code), zap.String("flag", flag), zap.Error(err))
	return code
}

type options struct {
	flags          *pflag.FlagSet // every flag, bound to the settings it sets (cli.Bind)
	spec           launcher.Spec
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
		var pe *cli.PETError
		errors.As(err, &pe)
		return nil, &failure.ConfigError{Field: setting.Named(pe.Var), Value: pe.Value, Hint: fmt.Sprintf("not a valid --%s (%v); fix or unset it", pe.Flag, pe.Err)}
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
	fn                                     *launcher.FnSpec
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
	cli.Bind(fs, "grace", setting.Grace)
	fs.DurationVar(&o.spec.Timeout, "timeout", 0, "stop the run after this long and exit 124 (0: no limit)")
	cli.Bind(fs, "timeout", setting.Timeout)
	fs.IntVar(&o.spec.MaxRestarts, "max-restarts", 0, "restart the whole group up to this many times after a failure")
	cli.Bind(fs, "max-restarts", setting.MaxRestarts)
	fs.StringVar(&o.spec.LogDir, "log-dir", "", "write DIR/<run-id>_<random>/attempt_<n>/<local-rank>/{stdout,stderr}.log")
	cli.Bind(fs, "log-dir", setting.LogDir)
	fs.StringVarP(&raw.redirects, "redirects", "r", "", "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank \"0:1,1:2\"")
	fs.StringVarP(&raw.tee, "tee", "t", "", "streams sent to the console and the log files (same syntax as --redirects)")
	fs.StringVar(&raw.filter, "local-ranks-filter", "", "show only these local ranks on the console, e.g. 0 or 0,2-3")
	fs.StringVar(&raw.stdin, "stdin", "all", "which workers read tpurun's stdin: all (as torchrun), 0 (local rank 0), none (/dev/null); a terminal goes to local rank 0 only")
	cli.Bind(fs, "stdin", setting.Stdin)
	fs.StringVar(&o.spec.LogPrefix, "log-prefix", "", "prefix of each line of worker output, e.g. '[{rank}] ': {rank} {local_rank} {node} {role} (or torchrun's $rank...); default none, as torchrun (with --tee, torchrun's '"+console.TeePrefix+"')")
	fs.StringVar(&o.logFormat, "log-format", "console", "format of tpurun's own logs: console or json")
	fs.StringVar(&o.spec.RunID, "run-id", "", "run id (TORCHELASTIC_RUN_ID, TPURUN_RUN_ID); default random")
	cli.Bind(fs, "run-id", setting.RunID)
	fs.StringVar(&o.spec.MasterAddr, "master-addr", spec.DefaultMasterAddr, "MASTER_ADDR given to the workers")
	cli.Bind(fs, "master-addr", setting.MasterAddr)
	fs.IntVar(&o.spec.MasterPort, "master-port", 0, "MASTER_PORT given to the workers (0: a free port)")
	cli.Bind(fs, "master-port", setting.MasterPort)
	fs.StringVar(&o.spec.Role, "role", workerenv.DefaultRole, "ROLE_NAME given to the workers")
	cli.Bind(fs, "role", setting.Role)
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "debug logs")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "tpurun's own lines only when something fails: its warnings and errors, the summary of an attempt that did not end well (tpurun.spawn and run pass it)")
	fs.BoolVarP(&raw.help, "help", "h", false, "show this help")
	fs.BoolVar(&raw.version, "version", false, "print the version of tpurun and of its Python module")
	fs.BoolVar(&raw.pyPath, "python-path", false, "install the tpurun Python module (once, in the user's cache) and print the directory to put on PYTHONPATH")
	fs.BoolVar(&o.exitWithParent, "exit-with-parent", false, "stop as on SIGTERM when the process that started tpurun exits, not a thread of it (tpurun.run and spawn set it)")
	o.tr = addTorchFlags(fs)
	fs.StringVar(&o.statusAddr, "status-addr", "", "serve /healthz and /metrics (Prometheus) on HOST:PORT, loopback only (port 0 picks one; the address is printed on stderr)")
	cli.Bind(fs, "status-addr", setting.StatusAddr)
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
		dir, err := worker.PythonPath("", worker.WithExecutable())
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
	fmt.Fprintf(w, usageText, fs.FlagUsages(), exitcode.Help)
}

// addResultFlags registers the result-contract flags: --fn, --fn-args-json, --python (into the returned FnSpec,
// used when --fn is given), --expect-results, --max-result-bytes, --results (into spec.Results), --json and
// --json-frames.
func addResultFlags(fs *pflag.FlagSet, spec *launcher.Spec, json, frames *bool) *launcher.FnSpec {
	f := &launcher.FnSpec{}
	fs.StringVar(&f.Target, "fn", "", "function mode: run package.module:function(index, *args) in every worker (Python) and collect its return value; positional ARGS are passed as strings")
	cli.Bind(fs, "fn", setting.Function)
	fs.StringVar(&f.ArgsJSON, "fn-args-json", "", "JSON list of the first arguments after index for --fn, e.g. '[3, {\"lr\": 0.1}]'")
	cli.Bind(fs, "fn-args-json", setting.FunctionArgs)
	fs.StringVar(&f.Python, "python", "", "Python interpreter for --fn, PROGRAM.py, -m and --run-path (default $PYTHON_EXEC, else tpurun.spawn's caller, else the python3 beside tpurun, else python3 from PATH)")
	fs.BoolVar(&spec.Results.Required, "expect-results", false, "require one result per replica from plain programs too (implied by --fn)")
	// not given (0): the limit is left to its owner, the frame decoder (worker.DefaultMaxPayload); help shows it
	fs.Int64Var(&spec.Results.MaxFrameBytes, "max-result-bytes", 0,
		fmt.Sprintf("largest accepted result frame payload in bytes (default %d)", worker.DefaultMaxPayload))
	cli.Bind(fs, "max-result-bytes", setting.MaxResultBytes)
	fs.StringVar(&spec.Results.File, "results", "", "write the results document (JSON) to FILE atomically, also when the run fails")
	cli.Bind(fs, "results", setting.ResultsFile)
	fs.BoolVar(json, "json", false, "print the results document as the last thing on stdout; worker and tpurun output go to stderr")
	fs.BoolVar(frames, "json-frames", false, "--json, with each pickled value raw before the document, as a result frame (worker/PROTOCOL.md): what tpurun.spawn reads")
	return f
}

// subcommand runs `tpurun plan` and `tpurun doctor`; ok is false when args name neither (a program named plan
// still runs as `tpurun -- plan`).
func subcommand(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "plan":
		return planCmd(args[1:], stdout, stderr), true
	case "doctor":
		return doctorCmd(args[1:], stdout, stderr), true
	case "help":
		return helpCmd(args[1:], stdout, stderr), true
	}
	return 0, false
}

// rdzvFlags are the multi-host flags (torchrun's names plus tpurun's).
type rdzvFlags struct {
	fs                                                                        *pflag.FlagSet
	nnodes, backend, endpoint, id, conf, token, nodeName, nodeAddr, localAddr string
	nodeRank, numSlices, sliceID                                              int
	timeout                                                                   cli.Seconds
}

func addRdzvFlags(fs *pflag.FlagSet) *rdzvFlags {
	r := &rdzvFlags{fs: fs}
	fs.StringVar(&r.nnodes, "nnodes", "1", "number of nodes (hosts) of the job: N, or MIN:MAX for an elastic world that restarts with the nodes it has")
	cli.Bind(fs, "nnodes", setting.NNodes, setting.RendezvousNodes, setting.RendezvousMinNodes)
	fs.IntVar(&r.nodeRank, "node-rank", -1, "this node's rank (default: assigned by the rendezvous, or from TPU_WORKER_ID / SLURM_NODEID)")
	cli.Bind(fs, "node-rank", setting.NodeRank, setting.RendezvousNodeRank)
	fs.StringVar(&r.backend, "rdzv-backend", "", "multi-host rendezvous: "+cli.RendezvousBackends()+" (default static when --nnodes > 1 without --rdzv-endpoint, else tcp)")
	cli.Bind(fs, "rdzv-backend", setting.RendezvousBackend)
	fs.StringVar(&r.endpoint, "rdzv-endpoint", "", "tcp/static: host:port of the embedded server (node 0); etcd: host:2379[,host:2379...]")
	cli.Bind(fs, "rdzv-endpoint", setting.RendezvousEndpoint)
	fs.StringVar(&r.id, "rdzv-id", "", "run id shared by every node (default: --run-id)")
	cli.Bind(fs, "rdzv-id", setting.RendezvousRunID)
	fs.StringVar(&r.conf, "rdzv-conf", "", "key=value,...: join_timeout, heartbeat, is_host, port, hosts, prefix, linger, last_call_timeout")
	cli.Bind(fs, "rdzv-conf", setting.RendezvousOption)
	fs.Var(&r.timeout, "rdzv-timeout", "how long to wait for every node to join: seconds or a duration such as 5m (default "+cli.DefaultRendezvousTimeout.String()+")")
	fs.StringVar(&r.token, "rdzv-token", "", "shared secret of the rendezvous (or env TPURUN_RDZV_TOKEN); required off loopback")
	cli.Bind(fs, "rdzv-token", setting.RendezvousToken)
	fs.StringVar(&r.nodeName, "node-name", "", "this node's identity in the rendezvous (default: the hostname)")
	cli.Bind(fs, "node-name", setting.RendezvousHostName)
	fs.StringVar(&r.localAddr, "local-addr", "", "torchrun's name for --node-addr")
	fs.StringVar(&r.nodeAddr, "node-addr", "", "the address other nodes reach this node at (default: the local address toward the endpoint)")
	fs.IntVar(&r.numSlices, "num-slices", 0, "multi-slice: number of slices (default MEGASCALE_NUM_SLICES, else 1)")
	fs.IntVar(&r.sliceID, "slice-id", -1, "multi-slice: this node's slice (default MEGASCALE_SLICE_ID, else 0)")
	cli.Bind(fs, "slice-id", setting.SliceID)
	return r
}

// spec is the rendezvous of the job: a world of one (no backend; its node rank, slice, options and run id still
// checked and used) unless a backend, an endpoint or more than one node was asked for. runID is --run-id, the
// default of --rdzv-id; master is --master-addr and --master-port, the default endpoint of the static backend, as
// torchrun's. notes are warnings for the log.
func (r *rdzvFlags) spec(runID, masterAddr string, masterPort *int) (c launcher.RendezvousSpec, notes []string, err error) {
	lo, n, err := cli.ParseNNodes(r.nnodes)
	if err != nil {
		return c, nil, err
	}
	if r.fs.Changed("rdzv-timeout") && r.timeout == 0 {
		return c, nil, &failure.ConfigError{Field: "--rdzv-timeout", Value: "0", Hint: "must be positive: how long to wait for every node (default " + cli.DefaultRendezvousTimeout.String() + ")"}
	}
	c = launcher.RendezvousSpec{RunID: r.id, NodeRank: r.nodeRank, Conf: r.conf, Timeout: time.Duration(r.timeout), NumSlices: r.numSlices, SliceID: r.sliceID}
	if r.backend == "" && r.endpoint == "" && n <= 1 {
		// --nnodes 1 (--standalone sets it) is one node on purpose; without it, a host whose environment says it is
		// one of several joins them (launcher: discover)
		c.Alone = r.fs.Changed("nnodes")
		return c, nil, nil
	}
	c.Backend, c.Endpoint, c.NNodes, c.MinNodes, c.Token, c.NodeName = r.backend, r.endpoint, n, lo, r.token, r.nodeName
	c.Backend = cmp.Or(c.Backend, defaultBackend(c.Endpoint))
	c.NodeAddr = cmp.Or(r.nodeAddr, r.localAddr)
	c.RunID = cmp.Or(c.RunID, runID) // else the JobSet's, or torchrun's "none" (launcher.Spec)
	if !c.Elastic() && !r.fs.Changed("nnodes") {
		c.NNodes = 0 // a fixed world's size: from the host list
	}
	return c, r.master(&c, masterAddr, masterPort), nil
}

// defaultBackend is the backend of a multi-host launch without --rdzv-backend: tcp (c10d) on the endpoint given,
// else static (node 0 from the host list, or --master-addr).
func defaultBackend(endpoint string) string {
	if endpoint != "" {
		return "tcp"
	}
	return "static"
}

// master applies --master-addr and --master-port to the rendezvous c as torchrun does: the endpoint of a fixed
// world (static), which the launch lays out; under an elastic backend --master-addr is ignored with torchrun's
// warning (the notes returned).
func (r *rdzvFlags) master(c *launcher.RendezvousSpec, masterAddr string, masterPort *int) (notes []string) {
	given := r.fs.Changed("master-addr") || r.fs.Changed("master-port")
	switch {
	case c.Elastic() && r.fs.Changed("master-addr"):
		notes = append(notes, "--master-addr is only used by the static rendezvous (as under torchrun): under "+c.Backend+
			" every worker's MASTER_ADDR is node 0's address (give node 0 --node-addr to choose it); --master-port is node 0's MASTER_PORT")
	case !c.Elastic() && c.Endpoint == "" && given:
		// torchrun's classic multi-node line: every node names node 0 by --master-addr/--master-port. The workers'
		// store takes MASTER_PORT (29500 unless given), so tpurun's rendezvous server listens on the port above it.
		*masterPort = cmp.Or(*masterPort, 29500)
		c.Endpoint = net.JoinHostPort(masterAddr, strconv.Itoa(*masterPort+1))
		c.AllowUnauthenticated = true // as torchrun's line: its store on MASTER_PORT has no token either (one warning)
	}
	return notes
}

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
func (t *torchFlags) apply(fs *pflag.FlagSet, cfg *launcher.Spec, args []string, python string) error {
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
		return &failure.ConfigError{Field: setting.Named(f), Value: cfg.Grace.String(), Hint: "must be positive: the time between SIGTERM and SIGKILL (e.g. 1ms to kill at once)"}
	}
	if err := t.logsSpecs(); err != nil {
		return err
	}
	sigs, err := cli.ParseSignals(t.signals)
	if err != nil {
		return &failure.ConfigError{Field: "--signals-to-handle", Value: t.signals, Hint: err.Error()}
	}
	t.handled = sigs
	if fs.Lookup("signals-to-handle").Changed {
		t.noEffect = append(t.noEffect, "--signals-to-handle="+t.signals+" (every catchable signal is forwarded)")
	}
	m := cli.PythonMode{Module: t.module, NoPython: t.noPython, RunPath: t.runPath, Python: python}
	if fs.Changed("python") {
		m.PythonFlag = "--python"
	}
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
