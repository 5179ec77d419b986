package cli

import (
	"strings"
	"testing"
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
