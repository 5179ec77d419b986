package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"tpurun/launcher"
	"tpurun/launcher/topology"
)

// doctorReport is the JSON of `tpurun doctor --format json`: topology's doctor data plus the two failures it does
// not carry as JSON (the metadata error detection fell back from, and why a run would not plan).
type doctorReport struct {
	*topology.Doctor
	MetadataError string `json:"metadata_error,omitempty"`
	PlanError     string `json:"plan_error,omitempty"`
}

// doctorCmd is `tpurun doctor [flags]`: every detected value with its source, the chips and their device nodes,
// the processes holding them, the libtpu lockfile and metadata reachability with timing. It exits 0 when it could
// report (whatever it found), 2 when detection itself failed on the configuration.
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("tpurun doctor", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetNormalizeFunc(dashes)
	dev := addDeviceFlags(fs)
	var format, lockfile string
	var verbose bool
	fs.StringVar(&format, "format", "table", "output format: table or json")
	fs.StringVar(&lockfile, "lockfile", topology.DefaultLockfile, "the libtpu lockfile to check")
	_ = fs.MarkHidden("lockfile")
	fs.BoolVarP(&verbose, "verbose", "v", false, "debug logs")
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: %v\nRun 'tpurun doctor --help' for usage.\n", err)
		return launcher.ExitUsage
	}
	if *help {
		fmt.Fprintf(stdout, "tpurun doctor shows what tpurun detects on this host and why, and what could stop a run.\n\n"+
			"Usage:\n  tpurun doctor [flags]\n\nFlags:\n%s", fs.FlagUsages())
		return launcher.ExitOK
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tpurun doctor: unexpected argument %q: doctor takes flags only\n", fs.Arg(0))
		return launcher.ExitUsage
	}
	if format != "table" && format != "json" {
		fmt.Fprintf(stderr, "tpurun doctor: --format %q: use table or json\n", format)
		return launcher.ExitUsage
	}
	log, err := newLogger("console", verbose, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: %v\n", err)
		return launcher.ExitUsage
	}
	opts, err := dev.options(log)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: %v\n", err)
		return topologyExit(err)
	}
	opts.LookupEnv = os.LookupEnv
	ctx := context.Background()
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: detection failed: %v\n", err)
		return topologyExit(err)
	}
	rep := doctorReport{Doctor: topology.Diagnose(ctx, h, opts, lockfile)}
	if h.MetadataErr != nil {
		rep.MetadataError = h.MetadataErr.Error()
	}
	if _, err := topology.NewPlan(h, dev.request(h)); err != nil {
		rep.PlanError = err.Error()
	}
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = topology.WriteDoctor(stdout, rep.Doctor)
		if err == nil && rep.PlanError != "" {
			_, err = fmt.Fprintf(stdout, "plan: a run with these flags would not start: %s\n", rep.PlanError)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: writing the report: %v\n", err)
		return launcher.ExitInternal
	}
	return launcher.ExitOK
}
