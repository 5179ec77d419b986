package proc

import (
	"errors"
	"os/exec"
	"path/filepath"
)

// LookPath finds file as execvp, a shell and torchrun do: relative PATH entries ("./bin", an empty one) included.
// Go's exec.LookPath refuses such a find (exec.ErrDot); tpurun runs what its user's PATH names, by its absolute
// path, so that a worker's working directory cannot change what it names.
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
