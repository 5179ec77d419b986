package launcher

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"tpurun/launcher/topology"
)

// PythonCommand is the command line torchrun would run for args: PROGRAM.py and runPath run under python -u
// (python is $PYTHON_EXEC or python3), module as -m, noPython and everything else as is.
func PythonCommand(args []string, module, noPython, runPath bool, python string) []string {
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

// PythonMode is how torchrun's flags say to run PROGRAM: -m, --no-python, --run-path, and the interpreter.
type PythonMode struct {
	Module, NoPython, RunPath bool
	Python                    string // the interpreter: --python, else $PYTHON_EXEC; "" is python3 from PATH
	PythonFlag                string // the flag that named Python ("--python"), "" when it came from the environment
}

// PythonProgram is the command line for args (PROGRAM ARGS...) under m, as torchrun builds it: PROGRAM.py, -m and
// --run-path under the interpreter with -u (--run-path wins over --no-python), anything else as is. torchrun runs
// its own interpreter (sys.executable); tpurun has none and runs m.Python, else python3 from PATH. It refuses
// what torchrun refuses (--no-python with -m), and an interpreter flag that would not apply: a PROGRAM that runs
// as is would silently ignore it.
func PythonProgram(args []string, m PythonMode) ([]string, error) {
	if m.NoPython && m.Module {
		return nil, &ConfigError{Field: "--no-python", Value: "true", Hint: "cannot be combined with -m/--module (as under torchrun): drop one of them"}
	}
	noPython := m.NoPython && !m.RunPath
	cmd := PythonCommand(args, m.Module, noPython, m.RunPath, m.Python)
	if m.PythonFlag != "" && len(args) > 0 && cmd[0] != m.Python {
		return nil, &ConfigError{Field: m.PythonFlag, Value: m.Python, Hint: fmt.Sprintf("applies to a PROGRAM ending in .py, to -m and --run-path "+
			"(and --fn); PROGRAM %q runs as is: drop %s, or name the script, e.g. tpurun %s %s train.py", args[0], m.PythonFlag, m.PythonFlag, m.Python)}
	}
	return cmd, nil
}

// ParseSignals parses torchrun's signals-to-handle list: comma-separated names (SIGTERM or TERM) or numbers.
// SIGKILL and SIGSTOP cannot be handled and are refused.
func ParseSignals(s string) ([]os.Signal, error) {
	var out []os.Signal
	for part := range strings.SplitSeq(s, ",") {
		name := strings.ToUpper(strings.TrimSpace(part))
		if name == "" {
			continue
		}
		sig := unix.SignalNum("SIG" + strings.TrimPrefix(name, "SIG"))
		if n, err := strconv.Atoi(name); err == nil && unix.SignalName(syscall.Signal(n)) != "" {
			sig = syscall.Signal(n)
		}
		if sig == 0 || sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			return nil, fmt.Errorf("%q is not a signal tpurun can handle; use names like SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2 (SIGKILL and SIGSTOP cannot be handled)", strings.TrimSpace(part))
		}
		out = append(out, sig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("name at least one signal, e.g. SIGTERM,SIGINT")
	}
	return out, nil
}

// ParseNProcs parses a --nprocs / --nproc-per-node value: a whole number from 1, or (only for --nproc-per-node,
// as torchrun) auto, cpu, gpu or tpu.
func ParseNProcs(flag, s string) (n int, device string, err error) {
	v := strings.ToLower(strings.TrimSpace(s))
	words := nprocsWords()
	if slices.Contains(words, v) {
		if flag == "nprocs" {
			return 0, "", fmt.Errorf("--%s takes a number of processes; %q is a device word that only --nproc-per-node takes (or use --device %s)", flag, s, v)
		}
		return 0, v, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 1 || v != strconv.Itoa(n) {
		choices := "a whole number from 1"
		if flag != "nprocs" {
			choices += ", " + strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
		}
		return 0, "", fmt.Errorf("need %s, or leave --%s unset for one process per device", choices, flag)
	}
	if n > 65536 {
		return 0, "", fmt.Errorf("%d processes is more than tpurun starts on one host (65536)", n)
	}
	return n, "", nil
}

// nprocsWords are torchrun's device words of --nproc-per-node: auto, then the name of every device kind.
func nprocsWords() []string {
	words := []string{"auto"}
	for _, d := range topology.Devices() {
		words = append(words, string(d))
	}
	return words
}
