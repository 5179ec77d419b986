package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"tpurun/internal/testutil"
)

// blasProbe prints, per rank, the thread count of the OpenBLAS that torch loaded (openblas_get_num_threads), torch's
// intra-op threads, the process's threads at the start and the thread variables it sees.
const blasProbe = `import ctypes, os, torch
lib = [l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l.rsplit("/", 1)[-1]][0]
env = " ".join("%s=%s" % (k, os.environ.get(k)) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"))
print("rank %s blas=%d torch=%d tasks=%d %s" % (os.environ["RANK"], ctypes.CDLL(lib).openblas_get_num_threads(),
      torch.get_num_threads(), len(os.listdir("/proc/self/task")), env), flush=True)
`

// needPthreadOpenBLAS fails under CI, and skips elsewhere, unless Debian's torch loads OpenBLAS built with pthreads
// (libopenblas0-pthread, the active libblas.so.3 alternative): the BLAS whose pool starts at load.
func needPthreadOpenBLAS(t *testing.T) {
	t.Helper()
	out, err := exec.Command(torchPython, "-c", `import torch; print(open("/proc/self/maps").read())`).CombinedOutput()
	if err == nil && strings.Contains(string(out), "openblas-pthread") {
		return
	}
	msg := "torch does not load Debian's pthread OpenBLAS (apt-get install libopenblas0-pthread; update-alternatives " +
		"--display libblas.so.3-x86_64-linux-gnu)"
	if os.Getenv(testutil.EnvCI) == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
}

// TestPreloadTorchOpenBLASPthread: on a host whose BLAS is OpenBLAS with pthreads, importing torch starts BLAS
// threads, so the preloaded interpreter refused with one worker (exit 2). With OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
// and MKL_NUM_THREADS unset, or OPENBLAS_NUM_THREADS given, --preload torch runs at one worker and at two, and every
// forked worker has the thread counts and the environment of the exec'd one.
func TestPreloadTorchOpenBLASPthread(t *testing.T) {
	needTorch(t)
	needPthreadOpenBLAS(t)
	script := filepath.Join(t.TempDir(), "blas_probe.py")
	if err := os.WriteFile(script, []byte(blasProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`rank \d .*`)
	for _, tc := range []struct {
		nprocs string
		env    []string
	}{{"1", nil}, {"2", nil}, {"1", []string{"OPENBLAS_NUM_THREADS=2"}}} {
		got := map[string][]string{}
		for _, preload := range []string{"", "torch"} {
			cmd, out, errb := tpurun(t.TempDir(), nil, "--nprocs", tc.nprocs, "--device", "cpu", "--preload", preload, "--", torchPython, script)
			cmd.Env = append(slices.DeleteFunc(cmd.Env, func(kv string) bool {
				return strings.HasPrefix(kv, "OMP_NUM_THREADS=") || strings.HasPrefix(kv, "OPENBLAS_NUM_THREADS=") ||
					strings.HasPrefix(kv, "MKL_NUM_THREADS=") || strings.HasPrefix(kv, "GOTO_NUM_THREADS=")
			}), tc.env...)
			if code := testutil.WaitExit(t, cmd); code != 0 {
				t.Fatalf("--nprocs %s --preload %q %v: exit %d, want 0\n%s\n%s", tc.nprocs, preload, tc.env, code, out, errb)
			}
			got[preload] = line.FindAllString(out.String(), -1)
			slices.Sort(got[preload])
		}
		if len(got[""]) == 0 || !slices.Equal(got[""], got["torch"]) {
			t.Errorf("--nprocs %s %v: exec'd workers saw %q, preloaded ones %q", tc.nprocs, tc.env, got[""], got["torch"])
		}
	}
}

// TestPreloadRefusalNamesPoolVariable: a preloaded module that leaves a native thread while a thread-pool library is
// loaded (here libgomp, OpenMP's) is refused, and the refusal names the variable and value that keep such a pool
// from starting at import (OMP_NUM_THREADS=1) besides dropping the module.
func TestPreloadRefusalNamesPoolVariable(t *testing.T) {
	t.Parallel()
	py := python(t)
	mods := t.TempDir()
	src := "import _thread, ctypes, time\nctypes.CDLL(\"libgomp.so.1\")\n_thread.start_new_thread(time.sleep, (3600,))\n"
	if err := os.WriteFile(filepath.Join(mods, "gomppool.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", []string{"PYTHONPATH=" + mods}, "--nprocs", "1", "--device", "cpu", "--preload", "gomppool", "--", py, "-m", "json.tool", "--help")
	for _, want := range []string{"importing gomppool started 1 thread", "set OMP_NUM_THREADS=1 in tpurun's environment",
		"import gomppool inside the worker instead"} {
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, want 2 and %q in stderr:\n%s", r.code, want, r.stderr)
		}
	}
}
