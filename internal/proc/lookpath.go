package proc

import (
	"errors"
	"os/exec"
	"path/filepath"
)

// LookPath finds file as execvp does: a name with a slash as it is, else in each PATH entry in turn, a relative
// entry ("./bin", or an empty one, a leading, doubled or trailing ':', for the current directory) included, as a
// shell and torchrun find it. Go's exec.LookPath finds such a program too but refuses it (exec.ErrDot, against a
// PATH that a program did not choose); tpurun runs what its user's PATH names, so a program found there is taken,
// by its absolute path, so that a worker's working directory cannot change what it names.
func LookPath(file string) (string, error) {
	path, err := exec.LookPath(file)
	if errors.Is(err, exec.ErrDot) {
		return filepath.Abs(path)
	}
	return path, err
}

// Command is exec.Command(name, args...) with name found by LookPath: its Path and Err as LookPath leaves them.
func Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if errors.Is(cmd.Err, exec.ErrDot) {
		if abs, err := filepath.Abs(cmd.Path); err == nil {
			cmd.Path, cmd.Err = abs, nil
		}
	}
	return cmd
}
