package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/worker"
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

// TestWorkersPythonRules walks the workers' interpreter rule (spec.ResolvePython, which WorkersPython applies with
// this binary) from the first rule to the last: each holds while it applies and gives way to the next when its
// input goes, and each says its rule (what tpurun plan and doctor print).
func TestWorkersPythonRules(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tpurun")
	beside := filepath.Join(dir, "python3")
	for _, f := range []string{exe, beside} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"PYTHON_EXEC": "/opt/exec/python", worker.EnvCallerPython: "/opt/caller/python"}
	getenv := func(k string) string { return env[k] }
	steps := []struct {
		flag, exe string
		drop      func()
		want      spec.Python
		says      string
	}{
		{"/opt/flag/python", exe, nil, spec.Python{Path: "/opt/flag/python", Rule: spec.PythonFlag}, "(--python)"},
		{"", exe, nil, spec.Python{Path: "/opt/exec/python", Rule: spec.PythonEnv}, "($PYTHON_EXEC)"},
		{"", exe, func() { delete(env, "PYTHON_EXEC") }, spec.Python{Path: "/opt/caller/python", Rule: spec.PythonCaller}, "tpurun.spawn"},
		{"", exe, func() { delete(env, worker.EnvCallerPython) }, spec.Python{Path: beside, Rule: spec.PythonBeside}, "beside the tpurun binary"},
		{"", exe, func() { must(t, os.Chmod(beside, 0o644)) }, spec.Python{Path: "python3", Rule: spec.PythonPATH}, "from PATH"}, // not executable
		{"", exe, func() { must(t, os.Remove(beside)); must(t, os.Mkdir(beside, 0o755)) }, spec.Python{Path: "python3", Rule: spec.PythonPATH}, "from PATH"},
		{"", "", nil, spec.Python{Path: "python3", Rule: spec.PythonPATH}, "from PATH"}, // a launcher that is no tpurun binary
	}
	for i, s := range steps {
		if s.drop != nil {
			s.drop()
		}
		got := spec.ResolvePython(s.flag, getenv, s.exe)
		if got != s.want || !strings.Contains(got.String(), s.says) || !strings.HasPrefix(got.String(), got.Path+" ") {
			t.Errorf("step %d: %+v, says %q; want %+v, saying %q", i, got, got.String(), s.want, s.says)
		}
	}
	// The CLI's own: this test binary has no python3 beside it, so python3 from PATH, unless named.
	if got := WorkersPython("", func(string) string { return "" }); got.Rule != spec.PythonPATH {
		t.Errorf("WorkersPython with nothing set: %+v", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
