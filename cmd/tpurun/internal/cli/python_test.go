package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/internal/failure"
)

func TestPythonProgramLikeTorchrun(t *testing.T) {
	env, noEnv := "/opt/py", ""
	for _, c := range []struct {
		args                      []string
		module, noPython, runPath bool
		getenv                    string
		want                      string
	}{
		{[]string{"train.py", "--lr", "3"}, false, false, false, noEnv, "python3 -u train.py --lr 3"},
		{[]string{"train.py"}, false, false, false, env, "/opt/py -u train.py"},
		{[]string{"pkg.train", "x"}, true, false, false, env, "/opt/py -u -m pkg.train x"},
		{[]string{"train.py"}, false, true, false, env, "train.py"},
		{[]string{"./bin/worker"}, false, false, false, env, "./bin/worker"},
		{[]string{"script"}, false, false, true, noEnv, "python3 -u script"},
	} {
		got := strings.Join(pythonCommand(c.args, c.module, c.noPython, c.runPath, c.getenv), " ")
		if got != c.want {
			t.Errorf("pythonCommand(%q, m=%v, no-python=%v, run-path=%v) = %q, want %q", c.args, c.module, c.noPython, c.runPath, got, c.want)
		}
	}
}

// TestPythonProgramRefusesAMissingScript: a PROGRAM.py or --run-path file that is not there is refused before any
// worker starts, as a missing PROGRAM is (127); a module (-m) and a PROGRAM run as is are not files to check.
func TestPythonProgramRefusesAMissingScript(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.py")
	for _, m := range []PythonMode{{}, {RunPath: true}, {RunPath: true, NoPython: true}} {
		_, err := PythonProgram([]string{missing, "--lr", "3e-4"}, m)
		var pe *failure.ProgramError
		if !errors.As(err, &pe) || pe.Program != missing || failure.ExitCode(err) != 127 || !strings.Contains(err.Error(), missing) {
			t.Errorf("%+v: %v (exit %d), want a ProgramError naming %s, exit 127", m, err, failure.ExitCode(err), missing)
		}
	}
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		m    PythonMode
	}{{[]string{script}, PythonMode{}}, {[]string{"pkg.train"}, PythonMode{Module: true}}, {[]string{"missing.py"}, PythonMode{NoPython: true}}} {
		if _, err := PythonProgram(c.args, c.m); err != nil {
			t.Errorf("%q under %+v: %v", c.args, c.m, err)
		}
	}
}
