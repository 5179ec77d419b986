package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"tpurun/launcher"
	"tpurun/launcher/results"
	"tpurun/worker"
)

// targetErrorType is the error type the Python function runner reports when the --fn target is unusable.
const targetErrorType = "tpurun.TargetError"

// resultFlags are the result-contract flags: --fn, --fn-args-json, --python, --expect-results,
// --max-result-bytes, --results and --json.
type resultFlags struct {
	fn       string
	fnArgs   string
	python   string
	expect   bool
	maxBytes int64
	file     string
	json     bool

	onResult func() // counts each reported result (the status endpoint's results_received)

	mu         sync.Mutex
	collectors map[int]*results.Collector // per attempt
	pyDir      string                     // private dir holding the embedded Python module, removed by cleanup
}

func addResultFlags(fs *pflag.FlagSet) *resultFlags {
	f := &resultFlags{}
	fs.StringVar(&f.fn, "fn", "", "function mode: run package.module:function(index, *args) in every worker (Python) and collect its return value; positional ARGS are passed as strings")
	fs.StringVar(&f.fnArgs, "fn-args-json", "", "JSON list of the first arguments after index for --fn, e.g. '[3, {\"lr\": 0.1}]'")
	fs.StringVar(&f.python, "python", "", "Python interpreter for --fn (default $PYTHON_EXEC, else python3)")
	fs.BoolVar(&f.expect, "expect-results", false, "require one result per replica from plain programs too (implied by --fn)")
	fs.Int64Var(&f.maxBytes, "max-result-bytes", results.DefaultMaxFrameBytes, "largest accepted result frame payload in bytes")
	fs.StringVar(&f.file, "results", "", "write the results document (JSON) to FILE atomically, also when the run fails")
	fs.BoolVar(&f.json, "json", false, "print the results document as the last thing on stdout; worker and tpurun output go to stderr")
	return f
}

// check validates the flags; every error is a *launcher.ConfigError.
func (f *resultFlags) check() error {
	if f.maxBytes <= 0 || f.maxBytes > worker.MaxPayload {
		return &launcher.ConfigError{Field: "--max-result-bytes", Value: strconv.FormatInt(f.maxBytes, 10),
			Hint: fmt.Sprintf("must be 1..%d bytes", int64(worker.MaxPayload))}
	}
	if f.fn == "" {
		if f.fnArgs != "" {
			return &launcher.ConfigError{Field: "--fn-args-json", Value: f.fnArgs, Hint: "only with --fn package.module:function"}
		}
		return nil
	}
	mod, fn, ok := strings.Cut(f.fn, ":")
	if !ok || mod == "" || fn == "" {
		return &launcher.ConfigError{Field: "--fn", Value: f.fn,
			Hint: "name the function as package.module:function (or path/to/file.py:function)"}
	}
	if f.fnArgs != "" {
		var l []json.RawMessage
		if err := json.Unmarshal([]byte(f.fnArgs), &l); err != nil {
			return &launcher.ConfigError{Field: "--fn-args-json", Value: f.fnArgs,
				Hint: fmt.Sprintf("must be a JSON list (%v), e.g. '[3, \"x\"]'", err)}
		}
	}
	return nil
}

// setup wires the collectors into cfg and, for --fn, installs the embedded Python module once into a private
// temporary directory put first on PYTHONPATH and makes the program the function runner. args are the
// positional arguments (the function's extra string arguments with --fn). The caller runs cleanup at the end.
func (f *resultFlags) setup(cfg *launcher.Config, args []string) error {
	// Results are always collected and checked, so a duplicate or malformed report is never dropped silently;
	// the flags only decide whether every replica must report and where the document goes.
	if f.fn != "" {
		env := cfg.Env
		if env == nil {
			env = os.Environ()
		}
		python := f.python
		if python == "" {
			python = lookupEnv(env, "PYTHON_EXEC")
		}
		if python == "" {
			python = "python3"
		}
		d, err := os.MkdirTemp("", "tpurun-py-")
		if err != nil {
			return fmt.Errorf("%w: directory for the embedded Python module: %w; set TMPDIR", launcher.ErrInternal, err)
		}
		f.pyDir = d
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("%w: chmod %s: %w", launcher.ErrInternal, d, err)
		}
		if _, err := worker.InstallPython(d); err != nil {
			return fmt.Errorf("%w: install the Python module into %s: %w", launcher.ErrInternal, d, err)
		}
		pp := d
		if old := lookupEnv(env, "PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		cfg.Env = append(withoutEnv(env, "PYTHONPATH"), "PYTHONPATH="+pp)
		argsJSON := f.fnArgs
		if argsJSON == "" {
			argsJSON = "[]"
		}
		cfg.Program = append([]string{python, "-u", "-m", "tpurun.fn", "--args-json", argsJSON, f.fn}, args...)
	}
	f.collectors = map[int]*results.Collector{}
	cfg.NewResults = func(attempt int) launcher.ResultSink {
		nodes := 1
		world := 0
		if cfg.Plan != nil {
			nodes = max(1, len(cfg.Plan.Nodes))
			world = len(cfg.Plan.Workers)
		}
		c := results.NewCollector(results.Options{
			MaxFrameBytes: f.maxBytes,
			Required:      f.expect || f.fn != "",
			RunID:         cfg.RunID,
			WorldSize:     world,
			Nodes:         nodes,
			NodeRank:      cfg.NodeRank,
			Logger:        cfg.Logger,
			OnResult:      f.onResult,
		})
		f.mu.Lock()
		f.collectors[attempt] = c
		f.mu.Unlock()
		return c
	}
	return nil
}

// collector is attempt's collector (nil before that attempt started or without result flags): what a multi-host
// run publishes (Share) or merges into (Add).
func (f *resultFlags) collector(attempt int) *results.Collector {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.collectors[attempt]
}

// cleanup removes the private Python module directory.
func (f *resultFlags) cleanup() {
	if f.pyDir != "" {
		_ = os.RemoveAll(f.pyDir)
	}
}

// finish builds the last attempt's results document, explains what went wrong with the results on stderr,
// writes --results and prints --json, and returns tpurun's exit code: a worker's failure wins, then 2 for an
// unusable --fn target, then the document's code (65 for a violated contract, 1 for a reported error).
func (f *resultFlags) finish(rep *launcher.Report, runErr error, code int, stdout, stderr io.Writer) int {
	if rep == nil || rep.Last() == nil {
		return code
	}
	last := rep.Last()
	c := f.collector(last.Number)
	if c == nil {
		return code
	}
	doc, _ := c.Finish(last.ResultExits())
	doc.RunID = rep.RunID
	var we *launcher.WorkerError
	if runErr == nil || (errors.Is(runErr, launcher.ErrResults) && !errors.As(runErr, &we)) {
		code = doc.ExitCode
	}
	if f.fn != "" {
		for _, r := range doc.Results {
			if r.Error != nil && r.Error.Type == targetErrorType {
				fmt.Fprintf(stderr, "tpurun: --fn %s: %s\n", f.fn, r.Error.Message)
				code = launcher.ExitUsage
				break
			}
		}
	}
	if code != launcher.ExitUsage {
		launcher.WriteResultsSummary(stderr, doc)
	}
	if runErr == nil && code != 0 {
		fmt.Fprintf(stderr, "tpurun: %d violation(s) of the result contract, %d replica error(s) (exit %d)\n",
			len(doc.Violations), replicaErrors(doc), code)
	}
	doc.ExitCode = code
	doc.OK = doc.OK && code == 0
	if f.file != "" {
		if err := results.WriteFile(f.file, doc); err != nil {
			fmt.Fprintf(stderr, "tpurun: --results %s: %v\n", f.file, err)
			if code == 0 {
				code = launcher.ExitInternal
			}
		}
	}
	if f.json {
		b, err := json.Marshal(doc)
		if err != nil {
			fmt.Fprintf(stderr, "tpurun: --json: %v\n", err)
			return launcher.ExitInternal
		}
		_, _ = stdout.Write(append(b, '\n'))
	}
	return code
}

func replicaErrors(doc *results.Document) int {
	n := 0
	for _, r := range doc.Results {
		if !r.OK {
			n++
		}
	}
	return n
}

// lookupEnv is the value of key in env (last one wins, as for exec).
func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

func withoutEnv(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}
