package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// EnvCI is set to "true" on CI, where every tool a test needs must be present: a test that lacks one fails there.
const EnvCI = "CI"

// TorchPython is the interpreter of Debian's python3-torch and python3-cloudpickle (a python3 earlier on PATH may
// lack them).
const TorchPython = "/usr/bin/python3"

// needs are the requirements Need knows besides executables on PATH; each returns what it found (a path) or why
// the machine lacks it.
var needs = map[string]func() (string, error){
	// root: the test mounts, unshares or writes a root-only /proc file.
	"root": func() (string, error) {
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("running as uid %d, not root", os.Geteuid())
		}
		return "root", nil
	},
	// tmpfs: the test mounts a small tmpfs (a full disk); needs CAP_SYS_ADMIN in the mount namespace.
	"tmpfs": func() (string, error) {
		d, err := os.MkdirTemp("", "tpurun-need-tmpfs-")
		if err != nil {
			return "", err
		}
		defer os.Remove(d)
		if err := syscall.Mount("tpurun-need", d, "tmpfs", 0, "size=4k"); err != nil {
			return "", fmt.Errorf("mount a tmpfs: %w (run as root)", err)
		}
		_ = syscall.Unmount(d, syscall.MNT_DETACH)
		return "tmpfs", nil
	},
	// namespaces: the test starts processes in mount and UTS namespaces of their own (a pod: its own /etc/hosts
	// and hostname); needs CAP_SYS_ADMIN, which root in an unprivileged container lacks.
	"namespaces": func() (string, error) {
		errc := make(chan error, 1)
		go func() {
			// The thread that unshares is never unlocked: it ends with this goroutine, and its namespaces with it.
			runtime.LockOSThread()
			errc <- unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWUTS)
		}()
		if err := <-errc; err != nil {
			return "", fmt.Errorf("unshare(CLONE_NEWNS|CLONE_NEWUTS): %w (run as root, with CAP_SYS_ADMIN)", err)
		}
		return "namespaces", nil
	},
	// ns_last_pid: the test chooses the next pid (pid reuse); root only.
	"ns_last_pid": func() (string, error) {
		const p = "/proc/sys/kernel/ns_last_pid"
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return "", fmt.Errorf("cannot choose the next pid: %w (run as root)", err)
		}
		f.Close()
		return p, nil
	},
	// torch: Debian's PyTorch under /usr/bin/python3 (.ci/deps installs python3-torch).
	"torch": func() (string, error) {
		out, err := exec.Command(TorchPython, "-c", "import torch.distributed").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s -c 'import torch.distributed': %v: %s (apt-get install python3-torch)", TorchPython, err, out)
		}
		return TorchPython, nil
	},
	// cloudpickle: Debian's python3-cloudpickle under /usr/bin/python3 (.ci/deps installs it), with which
	// tpurun.spawn sends functions by value.
	"cloudpickle": func() (string, error) {
		out, err := exec.Command(TorchPython, "-c", "import cloudpickle").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s -c 'import cloudpickle': %v: %s (apt-get install python3-cloudpickle)", TorchPython, err, out)
		}
		return TorchPython, nil
	},
	// wheel: what `make wheel` and a venv to install it into need: Debian's python3 with PyPA's build, setuptools,
	// wheel and venv/ensurepip (.ci/deps installs python3-build, python3-setuptools, python3-wheel, python3-venv).
	"wheel": func() (string, error) {
		out, err := exec.Command(TorchPython, "-c", "import build, setuptools, wheel, venv, ensurepip").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s cannot build or install a wheel: %v: %s (apt-get install python3-build python3-setuptools "+
				"python3-wheel python3-venv)", TorchPython, err, out)
		}
		return TorchPython, nil
	},
	// jupyter: Debian's jupyter-nbconvert on PATH and its python3 kernel (ipykernel, jupyter_client, cloudpickle
	// for the cells' functions) under /usr/bin/python3 (.ci/deps installs jupyter-nbconvert, python3-ipykernel,
	// jupyter-client, python3-cloudpickle); the path of jupyter-nbconvert.
	"jupyter": func() (string, error) {
		nbconvert, err := exec.LookPath("jupyter-nbconvert")
		if err != nil {
			return "", fmt.Errorf("%w (apt-get install jupyter-nbconvert)", err)
		}
		out, err := exec.Command(TorchPython, "-c", "import ipykernel, jupyter_client, cloudpickle").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s has no Jupyter kernel: %v: %s (apt-get install python3-ipykernel jupyter-client "+
				"python3-cloudpickle)", TorchPython, err, out)
		}
		return nbconvert, nil
	},
}

// Need returns what the test needs, tool: an executable on PATH ("python3", "unshare"; its path is returned) or
// one of the requirements "root", "tmpfs", "namespaces", "ns_last_pid", "torch", "cloudpickle", "wheel",
// "jupyter". When the machine lacks it the test fails under CI=true (CI must provide everything) and is skipped
// otherwise, saying "SKIPPED, NOT PASSED" and why: a skipped test is never counted as passing.
func Need(t testing.TB, tool string) string {
	t.Helper()
	var got string
	var err error
	if check, ok := needs[tool]; ok {
		got, err = check()
	} else {
		got, err = exec.LookPath(tool)
	}
	if err == nil {
		return got
	}
	if errors.Is(err, exec.ErrNotFound) {
		err = fmt.Errorf("%s is not on PATH (.ci/deps installs what the tests need)", tool)
	}
	if os.Getenv(EnvCI) == "true" {
		t.Fatalf("this test needs %s, which CI must provide: %v", tool, err)
	}
	t.Skipf("SKIPPED, NOT PASSED: this test needs %s: %v", tool, err)
	return ""
}
