package main

import (
	"github.com/spf13/pflag"

	"tpurun/launcher"
	"tpurun/worker"
)

// addResultFlags registers the result-contract flags: --fn, --fn-args-json, --python (into the returned FnSpec,
// used when --fn is given), --expect-results, --max-result-bytes, --results (into spec.Results) and --json.
func addResultFlags(fs *pflag.FlagSet, spec *launcher.Spec, json *bool) *launcher.FnSpec {
	f := &launcher.FnSpec{}
	fs.StringVar(&f.Target, "fn", "", "function mode: run package.module:function(index, *args) in every worker (Python) and collect its return value; positional ARGS are passed as strings")
	fs.StringVar(&f.ArgsJSON, "fn-args-json", "", "JSON list of the first arguments after index for --fn, e.g. '[3, {\"lr\": 0.1}]'")
	fs.StringVar(&f.Python, "python", "", "Python interpreter for --fn (default $PYTHON_EXEC, else python3)")
	fs.BoolVar(&spec.Results.Required, "expect-results", false, "require one result per replica from plain programs too (implied by --fn)")
	fs.Int64Var(&spec.Results.MaxFrameBytes, "max-result-bytes", worker.DefaultMaxPayload, "largest accepted result frame payload in bytes")
	fs.StringVar(&spec.Results.File, "results", "", "write the results document (JSON) to FILE atomically, also when the run fails")
	fs.BoolVar(json, "json", false, "print the results document as the last thing on stdout; worker and tpurun output go to stderr")
	return f
}
