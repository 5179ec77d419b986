package host

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"

	"tpurun/internal/pymodule"
)

// pythonPath puts the embedded Python module on every worker's PYTHONPATH, so `import tpurun` works in every
// mode: the shared copy in the user's cache (installed once, a stat afterwards), or a private temporary copy when
// the cache cannot be used. Function mode puts it first (its runner must be this version); otherwise it comes last,
// after whatever the user put there.
func (p *Prepared) pythonPath() error {
	s := p.spec
	dir, err := pymodule.Path("", "")
	if err != nil {
		p.Log.Debug("no shared copy of the Python module; using a private one", zap.Error(err))
		d, terr := os.MkdirTemp("", "tpurun-py-")
		if terr != nil {
			return fmt.Errorf("%w: directory for the Python module: %w (shared copy: %w); set TMPDIR", failure.ErrInternal, terr, err)
		}
		p.pyDir = d
		if dir, err = pymodule.Path(d, ""); err != nil {
			return fmt.Errorf("%w: install the Python module into %s: %w", failure.ErrInternal, d, err)
		}
	}
	p.PyModule = dir
	parts := []string{dir, spec.LookupEnv(s.Env, "PYTHONPATH")}
	if s.Fn == nil {
		parts[0], parts[1] = parts[1], parts[0]
	}
	pp := strings.Trim(strings.Join(parts, string(os.PathListSeparator)), string(os.PathListSeparator))
	s.Env = append(spec.WithoutEnv(s.Env, "PYTHONPATH"), "PYTHONPATH="+pp)
	return nil
}

// setupFn makes the program the function runner: python -u -m tpurun.fn --args-json ARGS TARGET [ARGS...].
func (p *Prepared) setupFn() error {
	f, s := p.spec.Fn, p.spec
	if err := f.Check(); err != nil {
		return err
	}
	// f.Python is the CLI's choice (cli.WorkersPython); a launcher library caller has no tpurun binary beside a python3
	python := spec.ResolvePython(f.Python, func(k string) string { return spec.LookupEnv(s.Env, k) }, "").Path
	if _, err := proc.LookPath(python); err != nil { // 127 or 126 before anything starts, as for a PROGRAM
		return &failure.ProgramError{Program: python, Err: err}
	}
	args := f.ArgsJSON
	if args == "" {
		args = "[]"
	}
	s.Program = append([]string{python, "-u", "-m", "tpurun.fn", "--args-json", args, f.Target}, f.Args...)
	return nil
}
