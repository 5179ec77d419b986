package launcher

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/worker"
)

// checkFn validates function mode's target and arguments.
func (f *FnSpec) check() error {
	mod, fn, ok := strings.Cut(f.Target, ":")
	if !ok || mod == "" || fn == "" {
		return &failure.ConfigError{Field: failure.SettingFunction, Value: f.Target,
			Hint: "name the function as package.module:function (or path/to/file.py:function)"}
	}
	if f.ArgsJSON != "" {
		var l []json.RawMessage
		if err := json.Unmarshal([]byte(f.ArgsJSON), &l); err != nil {
			return &failure.ConfigError{Field: failure.SettingFunctionArgs, Value: f.ArgsJSON,
				Hint: fmt.Sprintf("must be a JSON list (%v), e.g. '[3, \"x\"]'", err)}
		}
		if err := worker.CheckJSON([]byte(f.ArgsJSON)); err != nil { // the workers' json.loads would refuse it
			v := f.ArgsJSON
			if len(v) > 80 {
				v = v[:80] + "..."
			}
			return &failure.ConfigError{Field: failure.SettingFunctionArgs, Value: v, Hint: fmt.Sprintf("hold %v: pass it as a string (tpurun.spawn pickles such arguments)", err)}
		}
	}
	return nil
}

// pythonPath puts the embedded Python module on every worker's PYTHONPATH, so `import tpurun` works in every
// mode: the shared copy in the user's cache (installed once, a stat afterwards), or a private temporary copy when
// the cache cannot be used. Function mode puts it first (its runner must be this version); otherwise it comes last,
// after whatever the user put there.
func (j *job) pythonPath() error {
	s := &j.spec
	dir, err := worker.PythonPath("")
	if err != nil {
		j.log.Debug("no shared copy of the Python module; using a private one", zap.Error(err))
		d, terr := os.MkdirTemp("", "tpurun-py-")
		if terr != nil {
			return fmt.Errorf("%w: directory for the Python module: %w (shared copy: %w); set TMPDIR", failure.ErrInternal, terr, err)
		}
		j.pyDir = d
		if dir, err = worker.InstallPython(d); err != nil {
			return fmt.Errorf("%w: install the Python module into %s: %w", failure.ErrInternal, d, err)
		}
	}
	j.pyModule = dir
	parts := []string{dir, lookupEnv(s.Env, "PYTHONPATH")}
	if s.Fn == nil {
		parts[0], parts[1] = parts[1], parts[0]
	}
	pp := strings.Trim(strings.Join(parts, string(os.PathListSeparator)), string(os.PathListSeparator))
	s.Env = append(withoutEnv(s.Env, "PYTHONPATH"), "PYTHONPATH="+pp)
	return nil
}

// setupFn makes the program the function runner: python -u -m tpurun.fn --args-json ARGS TARGET [ARGS...].
func (j *job) setupFn() error {
	f, s := j.spec.Fn, &j.spec
	if err := f.check(); err != nil {
		return err
	}
	python := f.Python
	if python == "" {
		python = lookupEnv(s.Env, "PYTHON_EXEC")
	}
	if python == "" {
		python = "python3"
	}
	if _, err := exec.LookPath(python); err != nil { // 127 or 126 before anything starts, as for a PROGRAM
		return &failure.ProgramError{Program: python, Err: err}
	}
	args := f.ArgsJSON
	if args == "" {
		args = "[]"
	}
	s.Program = append([]string{python, "-u", "-m", "tpurun.fn", "--args-json", args, f.Target}, f.Args...)
	return nil
}
