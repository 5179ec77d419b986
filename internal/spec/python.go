package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"tpurun/internal/proc"
	"tpurun/worker"
)

// EnvPythonExec is torchrun's variable for the workers' interpreter (PROGRAM.py, -m and --run-path); tpurun.spawn's
// is worker.EnvCallerPython.
const EnvPythonExec = "PYTHON_EXEC"

// PythonRule names the rule that chose the workers' interpreter, in the order they are tried.
type PythonRule int

const (
	PythonFlag   PythonRule = iota // --python
	PythonEnv                      // $PYTHON_EXEC (torchrun's variable)
	PythonCaller                   // the interpreter that called tpurun.spawn or tpurun.run ($TPURUN_CALLER_PYTHON)
	PythonBeside                   // the python3 beside the tpurun binary: the Python tpurun was installed into
	PythonPATH                     // python3 from PATH
)

// Python is the workers' interpreter and the rule that chose it.
type Python struct {
	Path string // what the workers run: a path, or "python3" (PythonPATH), looked up on PATH when they start
	Rule PythonRule
}

// ResolvePython is the one owner of the rule that picks the workers' interpreter: flag (--python), else
// $PYTHON_EXEC, else the interpreter that called tpurun.spawn or run, else the python3 beside exe (the tpurun binary:
// a wheel installed into a virtual environment puts tpurun in venv/bin beside venv/bin/python3, as torchrun runs
// its own sys.executable; "" for a launcher that is no tpurun binary), else python3 from PATH. getenv reads the
// launcher's environment.
func ResolvePython(flag string, getenv func(string) string, exe string) Python {
	switch {
	case flag != "":
		return Python{flag, PythonFlag}
	case getenv(EnvPythonExec) != "":
		return Python{getenv(EnvPythonExec), PythonEnv}
	case getenv(worker.EnvCallerPython) != "":
		return Python{getenv(worker.EnvCallerPython), PythonCaller}
	}
	if exe != "" {
		beside := filepath.Join(filepath.Dir(exe), "python3")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return Python{beside, PythonBeside}
		}
	}
	return Python{"python3", PythonPATH}
}

// String says which interpreter and why, for tpurun plan and doctor: "/venv/bin/python3 (beside the tpurun binary
// /venv/bin/tpurun: the Python it was installed into)".
func (p Python) String() string {
	switch p.Rule {
	case PythonFlag:
		return p.Path + " (--python)"
	case PythonEnv:
		return p.Path + " ($" + EnvPythonExec + ")"
	case PythonCaller:
		return p.Path + " (the interpreter that called tpurun.spawn or tpurun.run: $" + worker.EnvCallerPython + ")"
	case PythonBeside:
		return fmt.Sprintf("%s (beside the tpurun binary: the Python it was installed into; --python or $%s to change)", p.Path, EnvPythonExec)
	}
	found, err := proc.LookPath(p.Path)
	if err != nil {
		found = "not found on PATH"
	}
	return fmt.Sprintf("%s from PATH (%s; --python or $%s to change)", p.Path, found, EnvPythonExec)
}
