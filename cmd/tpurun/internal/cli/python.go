package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"tpurun/internal/failure"
	"tpurun/internal/setting"
	"tpurun/internal/spec"
)

// PythonMode is how torchrun's flags say to run PROGRAM: -m, --no-python, --run-path, and the interpreter.
type PythonMode struct {
	Module, NoPython, RunPath bool
	Python                    string // the interpreter (WorkersPython's Path); "" is python3 from PATH
	PythonFlag                string // the flag that named Python ("--python"), "" when it came from the environment
}

// WorkersPython is the workers' interpreter for a tpurun command line whose --python is flag ("" when not given):
// spec.ResolvePython with this binary as the tpurun whose beside-it python3 is the Python it was installed into.
func WorkersPython(flag string, getenv func(string) string) spec.Python {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	return spec.ResolvePython(flag, getenv, exe)
}

// AddPythonFlag registers --python on the flags of tpurun plan and doctor, which say which interpreter a run with
// the same flags would start, and why (WorkersPython).
func AddPythonFlag(fs *pflag.FlagSet) *string {
	p := new(string)
	fs.StringVar(p, "python", "", "the workers' Python interpreter, as a run's --python: shown with the rule that chose it")
	return p
}

// PythonProgram is the command line for args (PROGRAM ARGS...) under m, as torchrun builds it: PROGRAM.py, -m and
// --run-path under the interpreter with -u (--run-path wins over --no-python), anything else as is. torchrun runs
// its own interpreter (sys.executable); tpurun runs m.Python (WorkersPython), else python3 from PATH. It refuses
// what torchrun refuses (--no-python with -m), an interpreter flag that would not apply (a PROGRAM that runs as is
// would silently ignore it), and a script that is not there (a *failure.ProgramError, exit 127: torchrun starts
// every worker, and again on each restart, to have Python say "can't open file").
func PythonProgram(args []string, m PythonMode) ([]string, error) {
	if m.NoPython && m.Module {
		return nil, &failure.ConfigError{Field: "--no-python", Value: "true", Hint: "cannot be combined with -m/--module (as under torchrun): drop one of them"}
	}
	noPython := m.NoPython && !m.RunPath
	cmd := pythonCommand(args, m.Module, noPython, m.RunPath, m.Python)
	if len(cmd) > len(args) && !m.Module { // PROGRAM.py or --run-path, under the interpreter: the script must be there
		if _, err := os.Stat(args[0]); err != nil { // before any worker starts, as a missing PROGRAM: 127, no restart
			return nil, &failure.ProgramError{Program: args[0], Err: err}
		}
	}
	if m.PythonFlag != "" && len(args) > 0 && cmd[0] != m.Python {
		return nil, &failure.ConfigError{Field: setting.Named(m.PythonFlag), Value: m.Python, Hint: fmt.Sprintf("applies to a PROGRAM ending in .py, to -m and --run-path "+
			"(and --fn); PROGRAM %q runs as is: drop %s, or name the script, e.g. tpurun %s %s train.py", args[0], m.PythonFlag, m.PythonFlag, m.Python)}
	}
	return cmd, nil
}

// pythonCommand is the command line torchrun would run for args: PROGRAM.py and runPath run under python -u
// (python is WorkersPython's, or python3), module as -m, noPython and everything else as is.
func pythonCommand(args []string, module, noPython, runPath bool, python string) []string {
	if noPython || len(args) == 0 {
		return args
	}
	if python == "" {
		python = "python3"
	}
	switch {
	case module:
		return append([]string{python, "-u", "-m"}, args...)
	case runPath || strings.HasSuffix(args[0], ".py"):
		return append([]string{python, "-u"}, args...)
	}
	return args
}
