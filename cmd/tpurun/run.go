package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/status"
	"tpurun/cmd/tpurun/internal/summary"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/job"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
)

// run is tpurun's command line, from its arguments to its exit code: a subcommand, or the job, run with the
// consoles, the logger and the status endpoint it asks for.
func run(args []string, stdout, stderr io.Writer) (code int) {
	if code, ok := subcommand(args, stdout, stderr); ok {
		return code
	}
	o, err := parse(args, stdout)
	if err == nil {
		err = handOff(o.rdzv.backend, args) // returns only when this build runs the job itself, or cannot hand it off
	}
	if err != nil {
		return parseFailed(stderr, err)
	}
	// Every catchable signal, forwarded or acted on, caught before tpurun writes anything or answers on
	// --status-addr (a signal meanwhile waits for Run, which stops at once), and never released: after the run a stop
	// signal still bounds the last writes, a closed stdout is EPIPE, not SIGPIPE. (Releasing them cost as much as
	// catching them: 1.4 ms of a run of one worker.)
	sigs, _ := stop.NotifySignals()
	// One writer per open file for everything tpurun writes (its logs, the workers' lines, stdout and stderr when
	// they are one file): lines never splice, a slow reader slows the workers, and logging never waits.
	outc, errc, _ := console.Of(stdout, stderr)
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
		return failure.ExitUsage
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
	if spec.Detect, err = o.dev.Options(); err != nil {
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
	// tpurun runs nothing but the job: with the reaper (reap), the orphan sweep walks its whole subtree; the
	// process-wide settings are tpurun's to make.
	spec.Reap, spec.SweepSubtree, spec.CatchSignals = !o.tr.noReaper, true, true
	return nil
}

// serveStatus serves --status-addr's /healthz and /metrics for the run, and says where; stop ends it.
func serveStatus(o *options, spec *spec.Spec, f failer, log *zap.Logger) (stop func(), err error) {
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
func report(o *options, spec *spec.Spec, sp *summary.Printer, f failer, c consoles) int {
	rep, err := job.Run(context.Background(), *spec)
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
