package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/launcher"
)

// TestREADMESpawnExampleAsWritten runs the README's Python example exactly as its lines say, from the repository
// root in a shell with tpurun on PATH and nothing else prepared (issue: "the README's own example fails as
// written"): the PYTHONPATH line, then spawn from examples/. Every replica's square must come back. Every other
// command line of the docs runs in docs.TestDocCommandsAsWritten (docs/commands_test.go).
func TestREADMESpawnExampleAsWritten(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	mustDo(t, err)
	var script []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "export PYTHONPATH=$(tpurun --python-path)") || strings.HasPrefix(line, "cd examples && python3 -c") &&
			strings.Contains(line, `tpurun.spawn("fn_square:square"`) {
			script = append(script, line)
		}
	}
	if len(script) != 2 {
		t.Fatalf("README: found %q, want the PYTHONPATH line and the spawn line", script)
	}
	python(t)
	cmd := exec.Command("sh", "-c", strings.Join(script, "\n"))
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the README's lines\n%s\nfailed: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(script, "\n"), err, out, stderr)
	}
	for _, want := range []string{"0: {'index': 0, 'square': 10,", "3: {'index': 3, 'square': 19,"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the README's spawn printed %q, want %q in it", out, want)
		}
	}
}

// TestREADMEWheelAsWritten runs the README's block for Python users as written (make wheel; a fresh venv with the
// wheel installed offline; the spawn example with the venv's python by its path) in a copy of the repository, from
// a shell whose PATH has neither tpurun nor the venv (go's directory and /usr/bin:/bin: Debian's python3 with
// build, setuptools, wheel and venv), with a python3 that lacks build before them, as a pyenv one would be: make
// wheel takes Debian's. Every replica's square comes back, from workers that the venv's tpurun started with the
// venv's python (the calling interpreter); the wheel is a platform wheel whose version is the binary's --version
// and whose module files are the ones the binary embeds.
func TestREADMEWheelAsWritten(t *testing.T) {
	t.Parallel()
	testutil.Heavy(t) // a go build of tpurun in a copy of the repository, and a venv
	testutil.Need(t, "wheel")
	testutil.Need(t, "make")
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	mustDo(t, err)
	_, block, ok := strings.Cut(string(b), "\n## For Python users: one wheel\n")
	_, block, ok2 := strings.Cut(block, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 || !strings.Contains(block, "make wheel") || !strings.Contains(block, "pip install --no-index dist/tpurun-") {
		t.Fatalf("README: no sh block with make wheel and pip install under \"## For Python users: one wheel\": %q", block)
	}
	top := t.TempDir()
	root, home := filepath.Join(top, "tpurun"), filepath.Join(top, "home")
	mustDo(t, testutil.CopyRepo(filepath.Join("..", ".."), root))
	env := testutil.WheelEnv(t, home)
	// First on PATH, a python3 without PyPA's build (as a pyenv, conda or venv python3 often is): a venv of
	// Debian's python3 without its dist-packages. make wheel takes /usr/bin/python3, which has build, instead.
	noBuild := filepath.Join(top, "nobuild")
	if out, err := exec.Command(testutil.TorchPython, "-m", "venv", "--without-pip", noBuild).CombinedOutput(); err != nil {
		t.Fatalf("a python3 without build: %v\n%s", err, out)
	}
	for i, kv := range env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + filepath.Join(noBuild, "bin") + ":" + path
		}
	}
	shell := func(script string) (string, error) {
		cmd := exec.Command("sh", "-e", "-c", script)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := shell("command -v tpurun || command -v python | grep venv"); err == nil {
		t.Fatalf("the shell finds %s: the test would not prove that the wheel's tpurun and python are used", out)
	}
	wheelNamesPython(t, shell, filepath.Join(noBuild, "bin", "python3"))
	out, err := shell(block)
	if err != nil {
		t.Fatalf("the README's lines\n%s\nfailed: %v\n%s", block, err, out)
	}
	if !strings.Contains(out, testutil.TorchPython+" -m build --wheel") {
		t.Errorf("make wheel, with a python3 without build first on PATH, did not build with %s:\n%s", testutil.TorchPython, out)
	}
	for _, want := range []string{"0: {'index': 0, 'square': 10,", "3: {'index': 3, 'square': 19,"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the README's spawn printed %q, want %q in it", out, want)
		}
	}
	// What the example used: the wheel's binary (found beside the module, off PATH), the venv's python in the
	// workers (the calling interpreter), the version the binary says, the module files the binary embeds.
	venv := filepath.Join(home, "venv")
	probeDir := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(probeDir, "exe.py"), []byte("import sys\ndef exe(index):\n    return sys.executable\n"), 0o644))
	probe := exec.Command(filepath.Join(venv, "bin", "python"), "-c", `import importlib.metadata as m, json, os, tpurun, tpurun._spawn as s
print(json.dumps({"binary": s.find_binary(), "version": m.version("tpurun"), "module": os.path.dirname(tpurun.__file__),
                  "workers": tpurun.spawn("exe:exe", nprocs=2)}))`)
	probe.Dir, probe.Env = probeDir, env
	got, err := probe.Output()
	if err != nil {
		t.Fatalf("the probe in the venv: %v\n%s", err, got)
	}
	var p struct {
		Binary, Version, Module string
		Workers                 map[string]string
	}
	mustDo(t, json.Unmarshal(got, &p))
	ver, err := exec.Command(filepath.Join(venv, "bin", "tpurun"), "--version").Output()
	mustDo(t, err)
	whl, _ := filepath.Glob(filepath.Join(root, "dist", "tpurun-*.whl"))
	want := "tpurun-" + launcher.Version + "-py3-none-" + wheelPlatform(runtime.GOARCH) + ".whl"
	switch {
	case p.Binary != filepath.Join(venv, "bin", "tpurun"):
		t.Errorf("tpurun.spawn runs %s, want the wheel's %s/bin/tpurun", p.Binary, venv)
	case len(p.Workers) != 2 || p.Workers["0"] != filepath.Join(venv, "bin", "python") || p.Workers["1"] != p.Workers["0"]:
		t.Errorf("the workers ran %v, want the venv's python (the caller's sys.executable)", p.Workers)
	case p.Version != launcher.Version || !strings.HasPrefix(string(ver), "tpurun "+p.Version+" "):
		t.Errorf("the wheel's version is %s, its tpurun --version says %q, want both %s", p.Version, ver, launcher.Version)
	case len(whl) != 1 || filepath.Base(whl[0]) != want:
		t.Errorf("make wheel built %q, want dist/%s", whl, want)
	}
	// The wheel installs tpurun-etcd beside tpurun (the etcd backend's binary, which tpurun hands etcd runs to).
	if etcdVer, err := exec.Command(filepath.Join(venv, "bin", "tpurun-etcd"), "--version").Output(); err != nil || string(etcdVer) != string(ver) {
		t.Errorf("the wheel's tpurun-etcd --version: %v, %q; want %q, as its tpurun", err, etcdVer, ver)
	}
	// tpurun plan and doctor, run by the venv's tpurun off PATH, say which interpreter a run takes and why: the
	// python3 beside it; a run's --python or $PYTHON_EXEC, when given, wins.
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"plan", "--device", "cpu"}, "", filepath.Join(venv, "bin", "python3") + " (beside the tpurun binary"},
		{[]string{"doctor", "--device", "cpu"}, "", "note: the workers' Python: " + filepath.Join(venv, "bin", "python3") + " (beside the tpurun binary"},
		{[]string{"plan", "--device", "cpu", "--python", "/opt/py"}, "PYTHON_EXEC=/usr/bin/python3", "the workers' Python: /opt/py (--python)"},
		{[]string{"doctor", "--device", "cpu"}, "PYTHON_EXEC=/usr/bin/python3", "the workers' Python: /usr/bin/python3 ($PYTHON_EXEC)"},
	} {
		cmd := exec.Command(filepath.Join(venv, "bin", "tpurun"), c.args...)
		cmd.Env = append(append([]string(nil), env...), c.env)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s tpurun %s: %v, want %q in:\n%s", c.env, strings.Join(c.args, " "), err, c.want, out)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "worker", "python", "tpurun", "*.py"))
	for _, f := range files {
		a, _ := os.ReadFile(f)
		if b, err := os.ReadFile(filepath.Join(p.Module, filepath.Base(f))); err != nil || !bytes.Equal(a, b) {
			t.Errorf("the wheel installed %s unlike the checkout's (%v)", filepath.Base(f), err)
		}
	}
	stdinFunctionFromTheWheel(t, venv, env)
}

// wheelNamesPython: make wheel with PYTHON= an interpreter without PyPA's build fails before it builds anything,
// naming that interpreter, what it lacks and the commands that fix it.
func wheelNamesPython(t *testing.T, shell func(string) (string, error), python string) {
	t.Helper()
	out, err := shell("make wheel PYTHON=" + python)
	want := []string{"make wheel: " + python + " cannot build the wheel: ModuleNotFoundError: No module named 'build'",
		"apt-get install -y python3-build python3-setuptools python3-wheel, then make wheel PYTHON=/usr/bin/python3",
		python + " -m pip install build setuptools wheel"}
	for _, w := range want {
		if err == nil || !strings.Contains(out, w) {
			t.Errorf("make wheel PYTHON=%s (no build there): %v, want a failure saying %q:\n%s", python, err, w, out)
		}
	}
	if strings.Contains(out, "go build") || strings.Contains(out, "-m build") {
		t.Errorf("make wheel PYTHON=%s (no build there) went on to build:\n%s", python, out)
	}
}

// stdinScript defines its function on stdin, where the workers cannot import it by name, and spawns it.
const stdinScript = `import tpurun
def f(i, k):
    return {"i": i, "k": k}
try:
    print(sorted(tpurun.spawn(f, args=(3,), nprocs=2, start_method="fork").items()))
except ValueError as e:
    print("refused:", e)
`

// stdinFunctionFromTheWheel: a function defined on stdin, spawned by the venv's python (off PATH) with the wheel's
// tpurun: refused by the README's plain venv, naming what to install; run by value once cloudpickle is installed
// in the venv (Debian's, pure Python, copied into its site-packages as pip would: no index here).
func stdinFunctionFromTheWheel(t *testing.T, venv string, env []string) {
	t.Helper()
	run := func() string {
		cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-")
		cmd.Dir, cmd.Env, cmd.Stdin = t.TempDir(), env, strings.NewReader(stdinScript)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the venv's python - (a function on stdin): %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "refused: ") || !strings.Contains(out, "`pip install cloudpickle`") {
		t.Fatalf("a function on stdin, no cloudpickle in the venv: printed %q, want a refusal naming pip install cloudpickle", out)
	}
	py := testutil.Need(t, "cloudpickle")
	src, err := exec.Command(py, "-c", "import cloudpickle, os; print(os.path.dirname(cloudpickle.__file__))").Output()
	mustDo(t, err)
	site, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if len(site) != 1 {
		t.Fatalf("the venv's site-packages: %v", site)
	}
	mustDo(t, os.CopyFS(filepath.Join(site[0], "cloudpickle"), os.DirFS(strings.TrimSpace(string(src)))))
	if out, want := run(), "[(0, {'i': 0, 'k': 3}), (1, {'i': 1, 'k': 3})]"; !strings.Contains(out, want) {
		t.Fatalf("a function on stdin, cloudpickle in the venv: printed %q, want %q", out, want)
	}
}

// wheelPlatform is the platform tag make wheel gives a static binary for goarch: every glibc and musl Linux.
func wheelPlatform(goarch string) string {
	m := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "ppc64le": "ppc64le", "s390x": "s390x"}[goarch]
	return "manylinux_2_17_" + m + ".manylinux2014_" + m + ".musllinux_1_1_" + m
}
