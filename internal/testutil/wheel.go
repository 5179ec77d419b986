package testutil

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CopyRepo copies the repository at root (its directories and regular files, without .git, bin/, build/ and
// dist/) into dst, so that a test can run `make` there and leave the checkout as it was.
func CopyRepo(root, dst string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case rel == ".git" || d.IsDir() && (rel == "bin" || rel == "build" || rel == "dist"):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // a worktree's .git file
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
}

// WheelEnv is the environment of a shell that builds and installs the wheel offline as a user would: PATH is the
// go tool's directory and /usr/bin:/bin (Debian's python3; neither tpurun nor a venv), HOME is home (made, with
// the go command's telemetry off), the go command uses this machine's build and module caches without the
// network, and pip reads no configuration and reaches no index (every proxy is the discard port).
func WheelEnv(t testing.TB, home string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool: %v", err)
	}
	// The go command's telemetry off in that home (`go telemetry off` writes this file): otherwise each go command
	// may start a child that outlives it, which a subreaper test binary inherits.
	mode := filepath.Join(home, ".config", "go", "telemetry", "mode")
	if err := os.MkdirAll(filepath.Dir(mode), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mode, []byte("off"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + filepath.Dir(goTool) + ":/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + t.TempDir(),
		"GOPROXY=off", "PIP_CONFIG_FILE=" + os.DevNull, "PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INPUT=1", "PYTHONDONTWRITEBYTECODE=1"}
	for _, k := range []string{"GOCACHE", "GOMODCACHE"} {
		out, err := exec.Command(goTool, "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"} {
		env = append(env, k+"=http://127.0.0.1:9")
	}
	return env
}

var wheel struct {
	once sync.Once
	path string
	err  error
}

// Wheel is the wheel `make wheel` builds from a copy of the repository at root (Debian's python3, Go's caches),
// built once per test binary; the copy is removed when the test binary exits (RemoveWheel).
func Wheel(t testing.TB, root string) string {
	t.Helper()
	Need(t, "wheel")
	Need(t, "make")
	wheel.once.Do(func() { wheel.path, wheel.err = buildWheel(t, root) })
	if wheel.err != nil {
		t.Fatal(wheel.err)
	}
	return wheel.path
}

// RemoveWheel removes what Wheel built: for TestMain, after the tests.
func RemoveWheel() {
	if wheel.path != "" {
		_ = os.RemoveAll(filepath.Dir(filepath.Dir(wheel.path)))
	}
}

func buildWheel(t testing.TB, root string) (string, error) {
	dir, err := os.MkdirTemp("", "tpurun-wheel-")
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "tpurun")
	if err := CopyRepo(root, src); err != nil {
		return "", err
	}
	cmd := exec.Command("make", "wheel", "PYTHON="+TorchPython)
	cmd.Dir, cmd.Env = src, WheelEnv(t, filepath.Join(dir, "home"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make wheel: %v\n%s", err, out)
	}
	whl, err := filepath.Glob(filepath.Join(src, "dist", "tpurun-*.whl"))
	if err != nil || len(whl) != 1 {
		return "", fmt.Errorf("make wheel left %q in dist/, want one wheel (%v)", whl, err)
	}
	return whl[0], nil
}

// InstallWheel makes a fresh virtual environment venv with Debian's python3 (seeing its site-packages, and so its
// torch, when systemSite) and installs the wheel into it offline, as a user would: pip install --no-index.
func InstallWheel(t testing.TB, whl, venv string, systemSite bool) {
	t.Helper()
	args := []string{"-m", "venv", venv}
	if systemSite {
		args = append(args, "--system-site-packages")
	}
	env := WheelEnv(t, t.TempDir())
	for _, c := range [][]string{append([]string{TorchPython}, args...),
		{filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-cache-dir", whl}} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
}
