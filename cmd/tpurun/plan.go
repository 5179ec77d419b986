package main

import (
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/cmd/tpurun/internal/hostview"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/workerenv"
	"tpurun/launcher"
)

// helpTopics are the texts of `tpurun help TOPIC`; exit-codes is the launcher's table.
//
//go:embed help/*.txt
var helpTopics embed.FS

// helpCmd is `tpurun help [TOPIC]`: the usage, or one topic (env, exit-codes, multihost, python).
func helpCmd(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		return run([]string{"--help"}, stdout, stderr)
	case args[0] == "exit-codes":
		fmt.Fprintln(stdout, failure.ExitHelp)
		return failure.ExitOK
	}
	b, err := helpTopics.ReadFile("help/" + args[0] + ".txt")
	if err != nil || len(args) > 1 {
		fmt.Fprintf(stderr, "tpurun help: no topic %q; topics: env, exit-codes, multihost, python\n", strings.Join(args, " "))
		return failure.ExitUsage
	}
	_, _ = stdout.Write(b)
	return failure.ExitOK
}

// subcmdFlags is what `tpurun plan` and `tpurun doctor` share: the device flags, --format table|json, -v and
// --help, flags only (no PROGRAM), and a console logger.
type subcmdFlags struct {
	name, about string
	fs          *pflag.FlagSet
	dev         *cli.Device
	format      string
	verbose     bool
	help        bool
	python      *string // --python: the workers' interpreter, shown with the rule that chose it
}

func newSubcmdFlags(name, about string) *subcmdFlags {
	s := &subcmdFlags{name: "tpurun " + name, about: about, fs: pflag.NewFlagSet("tpurun "+name, pflag.ContinueOnError)}
	s.fs.SetOutput(io.Discard)
	s.fs.SetNormalizeFunc(cli.Dashes)
	s.dev = cli.AddDevice(s.fs)
	s.python = s.fs.String("python", "",
		"the workers' Python interpreter, as a run's --python: shown with the rule that chose it")
	s.fs.StringVar(&s.format, "format", "table", "output format: table or json")
	s.fs.BoolVarP(&s.verbose, "verbose", "v", false, "debug logs")
	s.fs.BoolVarP(&s.help, "help", "h", false, "show this help")
	return s
}

// parse parses args and builds the logger; done means the command is over (help shown, or a usage error) with
// exit code code.
func (s *subcmdFlags) parse(args []string, stdout, stderr io.Writer) (log *zap.Logger, code int, done bool) {
	if err := s.fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", s.name, err, s.name)
		return nil, failure.ExitUsage, true
	}
	if s.help {
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s [flags]\n\nFlags:\n%s", s.about, s.name, s.fs.FlagUsages())
		return nil, failure.ExitOK, true
	}
	if s.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only (it starts no program)\n", s.name, s.fs.Arg(0))
		return nil, failure.ExitUsage, true
	}
	if s.format != "table" && s.format != "json" {
		fmt.Fprintf(stderr, "%s: --format %q: use table or json\n", s.name, s.format)
		return nil, failure.ExitUsage, true
	}
	log, err := console.NewLogger("console", console.Level(s.verbose, false), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", s.name, err)
		return nil, failure.ExitUsage, true
	}
	return log, 0, false
}

// planCmd is `tpurun plan [flags]`: launcher.Plan's dry run of the flags, printed with every worker's complete
// environment (the plan's PLUS the launcher's torchrun/tpurun variables). Nothing is started.
func planCmd(args []string, stdout, stderr io.Writer) int {
	sc := newSubcmdFlags("plan", "tpurun plan prints what a run with the same flags would start, without starting anything.")
	fs, dev := sc.fs, sc.dev
	var s launcher.Spec
	var masterAddr string
	fs.StringVar(&s.RunID, "run-id", "", "run id to show (default: a placeholder; a run picks a random one)")
	fs.StringVar(&masterAddr, "master-addr", spec.DefaultMasterAddr, "MASTER_ADDR to show")
	fs.IntVar(&s.MasterPort, "master-port", 0, "MASTER_PORT to show (0: a placeholder; a run picks a free port)")
	fs.StringVar(&s.Role, "role", workerenv.DefaultRole, "ROLE_NAME to show")
	fs.IntVar(&s.MaxRestarts, "max-restarts", 0, "TORCHELASTIC_MAX_RESTARTS to show")
	log, code, done := sc.parse(args, stdout, stderr)
	if done {
		return code
	}
	s.Logger = log // detection's
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		fmt.Fprintf(stderr, "tpurun plan: --master-port %d: use a port from 1 to 65535, or 0 for a free one\n", s.MasterPort)
		return failure.ExitUsage
	}
	if fs.Changed("master-addr") { // else node 0's address in a job-wide world, the default on one host
		s.MasterAddr = masterAddr
	}
	opts, err := dev.Options()
	if err != nil {
		fmt.Fprintf(stderr, "tpurun plan: %v\n", err)
		return failure.ExitCode(err)
	}
	req, perCPU := dev.Request()
	// The flags as a run reads them: detection's roots, and which flag gave the worker count.
	ctx := spec.WithAdjust(context.Background(), func(is *spec.Spec) { is.Detect, is.Request, is.PerCPU = opts, req, perCPU })
	d, err := launcher.Plan(ctx, s)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun plan: %v\n", err)
		return launcher.ExitCode(err)
	}
	if sc.format == "json" {
		err = hostview.WritePlanJSON(stdout, d)
	} else {
		fmt.Fprintf(stdout, "this host: node %d; device %s (from %s); the workers' Python: %s\n", d.Node, d.Device, d.DeviceSource, cli.WorkersPython(*sc.python, os.Getenv))
		err = hostview.WritePlanTable(stdout, d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun plan: writing the plan: %v\n", err)
		return failure.ExitInternal
	}
	for _, n := range d.Notes {
		fmt.Fprintf(stderr, "tpurun plan: note: %s\n", n)
	}
	if d.Refusal != nil {
		fmt.Fprintf(stderr, "tpurun plan: warning: a run would refuse to start: %v\n", d.Refusal)
	}
	return failure.ExitOK
}
