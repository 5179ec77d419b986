package spec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"tpurun/internal/failure"
	"tpurun/internal/hostname"
	"tpurun/internal/proc"
	"tpurun/worker"
)

// Validate checks the settings that need no detection; every error is a *failure.ConfigError or a
// *failure.ProgramError, the first one in the order of the checks below.
func (s *Spec) Validate() error {
	return cmp.Or(s.checkProgram(), s.checkBounds(), s.checkMaster(), s.checkNames(), s.checkFrames(), s.checkPlan(),
		s.checkPreload(), s.Rendezvous.Validate())
}

// checkProgram refuses a job without a program, or whose program cannot be found (function mode runs Python,
// found when it is set up).
func (s *Spec) checkProgram() error {
	switch {
	case s.Fn != nil:
		return nil
	case len(s.Program) == 0 || s.Program[0] == "":
		return &failure.ConfigError{Field: failure.Program, Value: "", Hint: "no program given; usage: tpurun [flags] [--] PROGRAM [ARGS...]"}
	}
	if _, err := proc.LookPath(s.Program[0]); err != nil {
		return &failure.ProgramError{Program: s.Program[0], Err: err}
	}
	return nil
}

// checkBounds refuses a negative grace period, timeout or number of restarts.
func (s *Spec) checkBounds() error {
	for _, d := range []struct {
		name failure.Setting
		v    time.Duration
	}{{failure.Grace, s.Grace}, {failure.Timeout, s.Timeout}} {
		if d.v < 0 {
			return &failure.ConfigError{Field: d.name, Value: d.v.String(), Hint: "must not be negative"}
		}
	}
	if s.MaxRestarts < 0 {
		return &failure.ConfigError{Field: failure.MaxRestarts, Value: strconv.Itoa(s.MaxRestarts), Hint: "must be 0 or more"}
	}
	return nil
}

// checkMaster refuses a master address that is no host and a master port that is no port.
func (s *Spec) checkMaster() error {
	if s.MasterAddr != "" && hostname.Check(s.MasterAddr) != nil {
		return &failure.ConfigError{Field: failure.MasterAddr, Value: s.MasterAddr, Hint: "is neither an IP address nor a host name; give node 0's address, e.g. 10.0.0.2 or host-0.example"}
	}
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		return &failure.ConfigError{Field: failure.MasterPort, Value: strconv.Itoa(s.MasterPort), Hint: "must be 1..65535, or 0 to pick a free port"}
	}
	return nil
}

// checkNames refuses a run id or role that cannot be a directory name (see validateName).
func (s *Spec) checkNames() error {
	return cmp.Or(validateName(failure.RunID, s.RunID), validateName(failure.Role, s.Role))
}

// checkFrames refuses a largest result frame beyond the contract's.
func (s *Spec) checkFrames() error {
	if s.Results.MaxFrameBytes < 0 || s.Results.MaxFrameBytes > worker.MaxPayload {
		return &failure.ConfigError{Field: failure.MaxResultBytes, Value: strconv.FormatInt(s.Results.MaxFrameBytes, 10),
			Hint: fmt.Sprintf("must be 1..%d bytes", int64(worker.MaxPayload))}
	}
	return nil
}

// checkPlan refuses a ready plan that has no workers on the node this launcher runs.
func (s *Spec) checkPlan() error {
	if s.Plan != nil && len(s.Plan.Local(s.NodeRank)) == 0 {
		return &failure.ConfigError{Field: failure.NodeRank, Value: strconv.Itoa(s.NodeRank),
			Hint: fmt.Sprintf("the plan has no workers on node %d; it has %d node(s)", s.NodeRank, len(s.Plan.Nodes))}
	}
	return nil
}

// validateName checks a run id or role ("": not given): it becomes a directory name and an env value, so it holds
// no path separator, no "..", no control character, and at most 128 bytes.
func validateName(what failure.Setting, v string) error {
	bad := ""
	switch {
	case v == "":
		return nil
	case len(v) > 128:
		bad = fmt.Sprintf("is %d bytes long; the limit is 128", len(v))
	case v == "." || v == ".." || strings.Contains(v, ".."):
		bad = "contains '..'"
	case strings.ContainsAny(v, "/\\="):
		bad = "contains '/', '\\' or '='"
	}
	for _, r := range v {
		if bad == "" && (r < 0x20 || r == 0x7f) {
			bad = "contains a control character"
		}
	}
	if bad == "" {
		return nil
	}
	return &failure.ConfigError{Field: what, Value: v, Hint: bad + "; use letters, digits, '.', '-' and '_'"}
}

// moduleName is a dotted Python module name, or __main__ (function mode's caller).
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// checkPreload validates Spec.Preload: module names, and a reaper to adopt the forked workers.
func (s *Spec) checkPreload() error {
	if len(s.Preload) == 0 {
		return nil
	}
	list := strings.Join(s.Preload, ",")
	for _, m := range s.Preload {
		if !moduleName.MatchString(m) {
			return &failure.ConfigError{Field: failure.Preload, Value: list, Hint: fmt.Sprintf("%q is not a Python module name; "+
				"give dotted module names, comma-separated, e.g. torch,torch.distributed", m)}
		}
	}
	if !s.Reap && os.Getpid() != 1 {
		return PreloadReaperError(list)
	}
	return nil
}

// PreloadReaperError is the refusal of a preload without the reaper.
func PreloadReaperError(list string) error {
	return &failure.ConfigError{Field: failure.Preload, Value: list, Hint: "the workers forked by the preloaded interpreter are " +
		"re-parented to tpurun, which must be the child subreaper to supervise them: drop --no-subreaper, or --preload " +
		"(a Go program: set launcher.Process.Reap)"}
}

// Check validates function mode's target and arguments (its interpreter is looked for when it is set up).
func (f *FnSpec) Check() error {
	mod, fn, ok := strings.Cut(f.Target, ":")
	if !ok || mod == "" || fn == "" {
		return &failure.ConfigError{Field: failure.Function, Value: f.Target,
			Hint: "name the function as package.module:function (or path/to/file.py:function)"}
	}
	if f.ArgsJSON != "" {
		var l []json.RawMessage
		if err := json.Unmarshal([]byte(f.ArgsJSON), &l); err != nil {
			return &failure.ConfigError{Field: failure.FunctionArgs, Value: f.ArgsJSON,
				Hint: fmt.Sprintf("must be a JSON list (%v), e.g. '[3, \"x\"]'", err)}
		}
		if err := worker.CheckJSON([]byte(f.ArgsJSON)); err != nil { // the workers' json.loads would refuse it
			v := f.ArgsJSON
			if len(v) > 80 {
				v = v[:80] + "..."
			}
			return &failure.ConfigError{Field: failure.FunctionArgs, Value: v, Hint: fmt.Sprintf("hold %v: pass it as a string (tpurun.spawn pickles such arguments)", err)}
		}
	}
	return nil
}
