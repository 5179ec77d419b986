package proc

import (
	"os/exec"
	"slices"
	"testing"
)

// TestEnvironIsExecCmds: the environment the forking thread gives a child is the one exec.Cmd.Start would: the
// last value of a key wins, an entry without '=' stays, an empty one goes, and a nil Env is the process's own.
func TestEnvironIsExecCmds(t *testing.T) {
	for _, env := range [][]string{
		nil,
		{},
		{"A=1", "B=2", "C=3"},
		{"A=1", "B=2", "C=3", "TPURUN_RESULT_ID=1:2"},
		{"A=1", "B=2", "A=3"},
		{"B=1", "A=2", "B=3", "=X=1", "=X=2", "NOEQ", "", "C=", "C=4"},
		{"A=1", "A0=2", "A_=3", "A=4"},
		{"A=1", "B=1", "C=1", "D=1", "E=1", "Z=1", "Y=1", "X=1", "W=1", "V=1", "U=1", "T=1", "S=1", "R=1", "A=2"},
	} {
		for _, dir := range []string{"", "/tmp"} {
			cmd := exec.Command("/bin/true")
			cmd.Env, cmd.Dir = env, dir
			if got, want := environ(cmd), cmd.Environ(); !slices.Equal(got, want) {
				t.Errorf("env %q dir %q:\n got %q\nwant %q", env, dir, got, want)
			}
		}
	}
}
