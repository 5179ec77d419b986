package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/cmd/tpurun/internal/hostview"
	"tpurun/internal/failure"
	"tpurun/internal/topology"
)

// doctorReport is the JSON of `tpurun doctor --format json`: topology's doctor data plus the two failures it does
// not carry as JSON (the metadata error detection fell back from, and why a run would not plan).
type doctorReport struct {
	*hostview.Doctor
	MetadataError string `json:"metadata_error,omitempty"`
	PlanError     string `json:"plan_error,omitempty"`
}

// doctorCmd is `tpurun doctor [flags]`: every detected value with its source, the chips and their device nodes,
// the processes holding them, the libtpu lockfile and metadata reachability with timing. It exits 0 when it could
// report (whatever it found), 2 when detection itself failed on the configuration.
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	sc := newSubcmdFlags("doctor", "tpurun doctor shows what tpurun detects on this host and why, and what could stop a run.")
	fs, dev := sc.fs, sc.dev
	var lockfile string
	fs.StringVar(&lockfile, "lockfile", topology.DefaultLockfile, "the libtpu lockfile to check")
	_ = fs.MarkHidden("lockfile")
	log, code, done := sc.parse(args, stdout, stderr)
	if done {
		return code
	}
	opts, err := dev.Options()
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: %v\n", err)
		return failure.ExitCode(err)
	}
	opts.LookupEnv = os.LookupEnv
	ctx := context.Background()
	h, err := topology.Detect(ctx, opts, log)
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: detection failed: %v\n", err)
		return failure.ExitCode(err)
	}
	rep := doctorReport{Doctor: hostview.Diagnose(ctx, h, opts, lockfile, log)}
	if h.MetadataErr != nil {
		rep.MetadataError = h.MetadataErr.Error()
	}
	req, _ := dev.Request()
	rep.Notes = append(hostview.Explain(h, req), "the workers' Python: "+cli.WorkersPython(*sc.python, os.Getenv).String())
	rep.SetJob(h.JobLayout(req))
	if _, err := topology.NewPlan(h, req, topology.World{}); err != nil {
		rep.PlanError = err.Error()
	}
	if sc.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = hostview.WriteDoctor(stdout, rep.Doctor)
		if err == nil && rep.PlanError != "" {
			_, err = fmt.Fprintf(stdout, "plan: a run with these flags would not start: %s\n", rep.PlanError)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "tpurun doctor: writing the report: %v\n", err)
		return failure.ExitInternal
	}
	return failure.ExitOK
}
