package launcher

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"tpurun/worker"
)

// checkFn validates function mode's target and arguments.
func (f *FnSpec) check() error {
	mod, fn, ok := strings.Cut(f.Target, ":")
	if !ok || mod == "" || fn == "" {
		return &ConfigError{Field: "function", Value: f.Target,
			Hint: "name the function as package.module:function (or path/to/file.py:function)"}
	}
	if f.ArgsJSON != "" {
		var l []json.RawMessage
		if err := json.Unmarshal([]byte(f.ArgsJSON), &l); err != nil {
			return &ConfigError{Field: "function arguments", Value: f.ArgsJSON,
				Hint: fmt.Sprintf("must be a JSON list (%v), e.g. '[3, \"x\"]'", err)}
		}
	}
	return nil
}

// setupFn installs the embedded Python module once into a private directory put first on PYTHONPATH and makes
// the program the function runner: python -u -m tpurun.fn --args-json ARGS TARGET [ARGS...].
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
	d, err := os.MkdirTemp("", "tpurun-py-")
	if err != nil {
		return fmt.Errorf("%w: directory for the embedded Python module: %w; set TMPDIR", ErrInternal, err)
	}
	j.pyDir = d
	if _, err := worker.InstallPython(d); err != nil {
		return fmt.Errorf("%w: install the Python module into %s: %w", ErrInternal, d, err)
	}
	pp := d
	if old := lookupEnv(s.Env, "PYTHONPATH"); old != "" {
		pp += string(os.PathListSeparator) + old
	}
	s.Env = append(withoutEnv(s.Env, "PYTHONPATH"), "PYTHONPATH="+pp)
	args := f.ArgsJSON
	if args == "" {
		args = "[]"
	}
	s.Program = append([]string{python, "-u", "-m", "tpurun.fn", "--args-json", args, f.Target}, f.Args...)
	return nil
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
