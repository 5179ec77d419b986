package main

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/cmd/tpurun/internal/hostview"
	"tpurun/internal/console"
	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
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
		fmt.Fprintln(stdout, exitcode.Help)
		return exitcode.OK
	}
	b, err := helpTopics.ReadFile("help/" + args[0] + ".txt")
	if err != nil || len(args) > 1 {
		fmt.Fprintf(stderr, "tpurun help: no topic %q; topics: env, exit-codes, multihost, python\n", strings.Join(args, " "))
		return exitcode.Usage
	}
	_, _ = stdout.Write(b)
	return exitcode.OK
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
	s.python = cli.AddPythonFlag(s.fs)
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
		return nil, exitcode.Usage, true
	}
	if s.help {
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s [flags]\n\nFlags:\n%s", s.about, s.name, s.fs.FlagUsages())
		return nil, exitcode.OK, true
	}
	if s.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only (it starts no program)\n", s.name, s.fs.Arg(0))
		return nil, exitcode.Usage, true
	}
	if s.format != "table" && s.format != "json" {
		fmt.Fprintf(stderr, "%s: --format %q: use table or json\n", s.name, s.format)
		return nil, exitcode.Usage, true
	}
	log, err := console.NewLogger("console", console.Level(s.verbose, false), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", s.name, err)
		return nil, exitcode.Usage, true
	}
	return log, 0, false
}

// planCmd is `tpurun plan [flags]`: detect the host, build the plan and print it with every worker's complete
// environment (the plan's PLUS the launcher's torchrun/tpurun variables). Nothing is started.
func planCmd(args []string, stdout, stderr io.Writer) int {
	sc := newSubcmdFlags("plan", "tpurun plan prints what a run with the same flags would start, without starting anything.")
	fs, dev := sc.fs, sc.dev
	var rt workerenv.Runtime
	fs.StringVar(&rt.RunID, "run-id", "", "run id to show (default: a placeholder; a run picks a random one)")
	fs.StringVar(&rt.MasterAddr, "master-addr", spec.DefaultMasterAddr, "MASTER_ADDR to show")
	fs.IntVar(&rt.MasterPort, "master-port", 0, "MASTER_PORT to show (0: a placeholder; a run picks a free port)")
	fs.StringVar(&rt.Role, "role", workerenv.DefaultRole, "ROLE_NAME to show")
	fs.IntVar(&rt.MaxRestarts, "max-restarts", 0, "TORCHELASTIC_MAX_RESTARTS to show")
	log, code, done := sc.parse(args, stdout, stderr)
	if done {
		return code
	}
	if rt.MasterPort < 0 || rt.MasterPort > 65535 {
		fmt.Fprintf(stderr, "tpurun plan: --master-port %d: use a port from 1 to 65535, or 0 for a free one\n", rt.MasterPort)
		return exitcode.Usage
	}
	h, plan, node, l, err := dev.DetectPlan(context.Background(), log)
	if l != nil { // the job-wide world a plain run joins: node 0's address, the run id it would have
		if !fs.Changed("master-addr") {
			rt.MasterAddr = l.Coordinator
		}
		rt.RunID = cmp.Or(rt.RunID, spec.JobSetRunID(os.Environ()), spec.NoRunID)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun plan: %v\n", err)
		return failure.ExitCode(err)
	}
	full := workerenv.Plan(plan, rt)
	if sc.format == "json" {
		err = hostview.WritePlanJSON(stdout, full)
	} else {
		fmt.Fprintf(stdout, "this host: node %d; device %s (from %s); the workers' Python: %s\n", node, h.Device.V, h.Device.Source, cli.WorkersPython(*sc.python, os.Getenv))
		err = hostview.WritePlanTable(stdout, full)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun plan: writing the plan: %v\n", err)
		return exitcode.Internal
	}
	if h.MetadataErr != nil {
		fmt.Fprintf(stderr, "tpurun plan: note: planned from what sysfs proves; %v\n", h.MetadataErr)
	}
	if note := h.GPUShareNote(len(plan.Workers)); note != "" {
		fmt.Fprintf(stderr, "tpurun plan: note: %s\n", note)
	}
	if err := h.CheckFree(); errors.Is(err, topology.ErrChipBusy) {
		fmt.Fprintf(stderr, "tpurun plan: warning: a run would refuse to start: %v\n", err)
	}
	return exitcode.OK
}
