// Command tpurun starts one worker process per device on this host with the per-rank environment that
// torchrun, PyTorch/XLA and JAX programs expect, supervises them and exits with the first failure's code.
//
//	tpurun [flags] [--] PROGRAM [ARGS...]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/launcher"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if code, ok := subcommand(args, stdout, stderr); ok {
		return code
	}
	o, err := parse(args, stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\nRun 'tpurun --help' for usage.\n", err)
		return launcher.ExitUsage
	}
	// One lock for everything written to stderr: tpurun's own logs and the workers' lines (the launcher's
	// per-stream lock writes through this one), so a log entry never lands inside a worker's line.
	stderr = zapcore.Lock(zapcore.AddSync(stderr))
	log, err := newLogger(o.logFormat, o.verbose, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return launcher.ExitUsage
	}
	defer func() { _ = log.Sync() }()
	o.cfg.Logger = log
	o.cfg.Stdout, o.cfg.Stderr = stdout, stderr
	if o.res.json {
		o.cfg.Stdout = stderr // stdout carries only the results document
	}
	stopReaper, err := o.tr.container(&o.cfg, log) // PID 1 or --subreaper: one wait4(-1) loop
	if err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return launcher.ExitUsage
	}
	defer stopReaper()
	st, stopStatus, err := o.status.start(&o.cfg, stderr) // --status-addr: /healthz and /metrics
	if err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return launcher.ExitUsage
	}
	if st != nil {
		o.res.onResult = st.ResultReceived
		o.live = st
	}
	defer stopStatus()
	if o.rdzv.enabled() {
		return runMultihost(o, log, stdout, stderr) // multi-host: rdzv.go
	}
	if err := o.dev.prepare(context.Background(), &o.cfg, log); err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return topologyExit(err)
	}
	if err := checkMasterPort(o.cfg.MasterAddr, o.cfg.MasterPort); err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return launcher.ExitUsage
	}

	defer o.res.cleanup()
	if err := o.res.setup(&o.cfg, o.fnArgs); err != nil {
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return launcher.ExitCode(err)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, o.tr.handled...)
	defer signal.Stop(sigs)
	o.cfg.Signals = sigs

	rep, err := launcher.Run(context.Background(), o.cfg)
	if rep != nil {
		rep.WriteSummary(stderr)
	}
	code := launcher.ExitCode(err)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
	}
	return o.res.finish(rep, err, code, stdout, stderr)
}

type options struct {
	cfg       launcher.Config
	dev       *deviceFlags     // --device, --nprocs and the other topology flags: detection runs in run()
	res       *resultFlags     // --fn, --json, --results and the other result-contract flags
	fnArgs    []string         // with --fn: the positional arguments, passed to the function as strings
	rdzv      *rdzvFlags       // --nnodes, --node-rank, --rdzv-*: multi-host runs (rdzv.go)
	tr        *torchFlags      // torchrun's remaining flags and the container flags (torchrun.go)
	status    *statusFlags     // --status-addr (status.go)
	live      *launcher.Status // the status endpoint's state; nil without --status-addr
	logFormat string
	verbose   bool
}

func parse(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := pflag.NewFlagSet("tpurun", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetInterspersed(false) // everything after PROGRAM belongs to PROGRAM
	fs.SetNormalizeFunc(dashes)
	var redirects, tee, filter string
	o.dev = addDeviceFlags(fs)
	o.res = addResultFlags(fs)
	fs.DurationVar(&o.cfg.Grace, "grace", launcherDefaultGrace, "time between SIGTERM and SIGKILL when stopping workers")
	fs.DurationVar(&o.cfg.Timeout, "timeout", 0, "stop the run after this long and exit 124 (0: no limit)")
	fs.IntVar(&o.cfg.MaxRestarts, "max-restarts", 0, "restart the whole group up to this many times after a failure")
	fs.StringVar(&o.cfg.LogDir, "log-dir", "", "write DIR/<run-id>/attempt_<n>/<rank>/{stdout,stderr}.log")
	fs.StringVar(&redirects, "redirects", "", "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank \"0:1,1:2\"")
	fs.StringVar(&tee, "tee", "", "streams sent to the console and the log files (same syntax as --redirects)")
	fs.StringVar(&filter, "local-ranks-filter", "", "show only these local ranks on the console, e.g. 0 or 0,2-3")
	fs.StringVar(&o.cfg.LogPrefix, "log-prefix", "[{rank}] ", "per-line prefix of worker output; {rank} {local_rank} {node} {role}")
	fs.StringVar(&o.logFormat, "log-format", "console", "format of tpurun's own logs: console or json")
	fs.StringVar(&o.cfg.RunID, "run-id", "", "run id (TORCHELASTIC_RUN_ID, TPURUN_RUN_ID); default random")
	fs.StringVar(&o.cfg.MasterAddr, "master-addr", "127.0.0.1", "MASTER_ADDR given to the workers")
	fs.IntVar(&o.cfg.MasterPort, "master-port", 0, "MASTER_PORT given to the workers (0: a free port)")
	fs.StringVar(&o.cfg.Role, "role", "default", "ROLE_NAME given to the workers")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "debug logs")
	help := fs.BoolP("help", "h", false, "show this help")
	o.tr = addTorchFlags(fs)
	o.status = addStatusFlags(fs)
	o.rdzv = addRdzvFlags(fs) // last: it skips the multi-host flags already registered
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := petEnv(fs, os.Getenv); err != nil { // torchrun's PET_<FLAG> defaults
		return nil, err
	}
	if *help {
		usage(stdout, fs)
		return nil, pflag.ErrHelp
	}
	if err := o.res.check(); err != nil {
		return nil, err
	}
	if o.res.fn != "" {
		o.fnArgs = fs.Args()
	} else if len(fs.Args()) == 0 {
		return nil, errors.New("no PROGRAM given; usage: tpurun [flags] [--] PROGRAM [ARGS...]")
	} else {
		o.cfg.Program = fs.Args()
	}
	if err := o.tr.apply(fs, &o.cfg, o.cfg.Program, os.Getenv); err != nil {
		return nil, err
	}
	var err error
	if o.cfg.Redirects, err = launcher.ParseStdSpec("--redirects", redirects); err != nil {
		return nil, err
	}
	if o.cfg.Tee, err = launcher.ParseStdSpec("--tee", tee); err != nil {
		return nil, err
	}
	if o.cfg.LocalRanksFilter, err = launcher.ParseRanks("--local-ranks-filter", filter); err != nil {
		return nil, err
	}
	if o.logFormat != "console" && o.logFormat != "json" {
		return nil, &launcher.ConfigError{Field: "--log-format", Value: o.logFormat, Hint: "use console or json"}
	}
	return o, nil
}

const launcherDefaultGrace = 10 * time.Second

func usage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, `tpurun starts one worker per device on this host and supervises them.

Usage:
  tpurun [flags] [--] PROGRAM [ARGS...]
  tpurun [flags] --fn package.module:function [ARGS...]   function(index, *args) per worker, results collected
  tpurun plan [flags]     print the plan (every worker's env) without starting anything; --format json
  tpurun doctor [flags]   what was detected and from where, who holds the chips, lockfile, metadata server

Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, TORCHELASTIC_* and PJRT_* like torchrun;
${local_rank} in ARGS is replaced per worker. Flags accept '_' for '-' (--nproc_per_node).

Flags:
%s
Exit codes:
  0      every worker exited 0
  1-125  the exit code of the first worker that failed
  128+N  the first worker that failed was killed by signal N (143 = SIGTERM, 137 = SIGKILL)
  2      usage or configuration error; nothing was started
  65     result contract violated (--fn, --expect-results, --results, --json); 1 if a replica reported an error
  69     rendezvous failed
  70     internal error of tpurun
  124    --timeout expired

Example:
  tpurun --nprocs 4 -- python3 train.py --lr 3e-4
`, fs.FlagUsages())
}

func newLogger(format string, verbose bool, w io.Writer) (*zap.Logger, error) {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		ec.EncodeCaller = nil
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format=%q: use console or json", format)
	}
	level := zapcore.InfoLevel
	if verbose {
		level = zapcore.DebugLevel
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)).Named("tpurun"), nil
}
