package attempt

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/topology"
)

// TestStartErrorNamesTheLimit: a worker that cannot be forked for want of processes (EAGAIN) or descriptors is an
// internal error (70) that says which limit to raise; the fork failed with a bare "resource temporarily
// unavailable" before.
func TestStartErrorNamesTheLimit(t *testing.T) {
	j := &Runner{Options: Options{Program: []string{"/bin/true"}}}
	cmd := exec.Command("/bin/true")
	for _, tc := range []struct {
		errno syscall.Errno
		want  string
	}{{syscall.EAGAIN, "raise ulimit -u"}, {syscall.EMFILE, "raise ulimit -n"}} {
		err := j.startError(topology.Worker{Rank: 3}, &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: tc.errno}, cmd)
		if !errors.Is(err, failure.ErrInternal) || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "rank 3") {
			t.Errorf("fork failing with %v: %v, want an internal error of rank 3 that says %q", tc.errno, err, tc.want)
		}
	}
	if err := j.startError(topology.Worker{}, &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: syscall.EIO}, cmd); strings.Contains(err.Error(), "ulimit") {
		t.Errorf("EIO: %v names a limit", err)
	}
}
