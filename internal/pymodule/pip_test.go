package pymodule

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// systemPython is Debian's interpreter: the one CI provides, with the venv module (Debian package python3-venv).
const systemPython = "/usr/bin/python3"

// treeState lists every path under root with its size and mode, to prove a build wrote nothing into the checkout.
func treeState(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lines = append(lines, p+" "+fi.Mode().String()+" "+strconv.FormatInt(fi.Size(), 10))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestPipInstallOffline installs the Python module the ordinary ways into a fresh virtual environment, with no
// package index and every proxy pointing at a closed port, pip's build isolation on: from the checkout
// (`pip install worker/python`), from the sdist the backend builds, and editable (`pip install -e`). Each time
// tpurun imports and runs in the venv, and the installed files are the embedded ones, byte for byte.
func TestPipInstallOffline(t *testing.T) {
	if out, err := exec.Command(systemPython, "-c", "import venv, ensurepip").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot create a virtual environment with pip (%v: %s): install the Debian package python3-venv "+
			"(it brings python3.X-venv, python3-pip-whl and python3-setuptools-whl); .ci/deps must install it", systemPython, err, bytes.TrimSpace(out))
	}
	src, err := filepath.Abs("../../worker/python")
	if err != nil {
		t.Fatal(err)
	}
	before := treeState(t, src)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(systemPython, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("%s -m venv %s: %v\n%s", systemPython, venv, err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	env := []string{"PYTHONDONTWRITEBYTECODE=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1",
		"PIP_CONFIG_FILE=" + os.DevNull, "HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "LANG" || k == "TMPDIR" {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"} {
		env = append(env, k+"=http://127.0.0.1:9") // the discard port: any network use fails
	}
	runIn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(py, args...)
		cmd.Env = env
		cmd.Dir = t.TempDir() // not the checkout: `import tpurun` must come from the venv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", py, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	probe := `
import json, os, subprocess, sys, tpurun
os.environ["TPURUN_REPLICAS"] = "0,2"
fn = subprocess.run([sys.executable, "-m", "tpurun.fn", "json:dumps"], capture_output=True, text=True)
print(json.dumps({"version": tpurun.__version__, "file": tpurun.__file__, "replicas": tpurun.replicas(),
                  "target": tpurun.target_of(json.dumps), "fn_exit": fn.returncode, "fn_stderr": fn.stderr}))
`
	cmd := exec.Command(py, "-c", "import tpurun")
	cmd.Env, cmd.Dir = env, t.TempDir()
	if err := cmd.Run(); err == nil {
		t.Fatal("tpurun imports in the fresh venv before it is installed; the test would prove nothing")
	}

	sdistDir := t.TempDir()
	build := exec.Command(systemPython, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import tpurun_backend as b; print(b.build_sdist(sys.argv[2]))",
		filepath.Join(src, "build-backend"), sdistDir)
	build.Env = env
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("build_sdist: %v\n%s", err, out)
	}
	sdist := filepath.Join(sdistDir, strings.TrimSpace(string(out)))

	m, err := embeddedModule()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		install  []string
		editable bool
	}{
		{"checkout", []string{src}, false},
		{"sdist", []string{sdist}, false},
		{"editable", []string{"-e", src}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runIn(append([]string{"-m", "pip", "install", "--no-index", "--no-cache-dir"}, tc.install...)...)
			defer runIn("-m", "pip", "uninstall", "-y", "tpurun")
			var got struct {
				Version, File, Target string
				Replicas              []int
				FnExit                int    `json:"fn_exit"`
				FnStderr              string `json:"fn_stderr"`
			}
			out := runIn("-c", probe)
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.Version != Version() || got.Target != "json:dumps" || len(got.Replicas) != 2 || got.Replicas[1] != 2 ||
				got.FnExit != 2 || !strings.Contains(got.FnStderr, "TPURUN_RESULT_FD is not set") {
				t.Fatalf("%+v", got)
			}
			pkg := filepath.Dir(got.File)
			if tc.editable {
				if pkg != filepath.Join(src, "tpurun") {
					t.Fatalf("editable install imports %s, want the checkout's %s", got.File, src)
				}
				return
			}
			if !strings.HasPrefix(pkg, venv+string(os.PathSeparator)) {
				t.Fatalf("tpurun imported from %s, not from the venv", got.File)
			}
			ents, err := os.ReadDir(pkg)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				if e.Name() != "__pycache__" {
					names = append(names, e.Name())
				}
			}
			if len(names) != len(m.files) {
				t.Fatalf("installed %v, want the %d embedded files", names, len(m.files))
			}
			for _, f := range m.files {
				b, err := os.ReadFile(filepath.Join(pkg, f.name))
				if err != nil || !bytes.Equal(b, f.data) {
					t.Fatalf("installed %s differs from the embedded one (%v)", f.name, err)
				}
			}
		})
	}
	if after := treeState(t, src); after != before {
		t.Fatalf("building wrote into the checkout %s:\nbefore:\n%s\nafter:\n%s", src, before, after)
	}
}
