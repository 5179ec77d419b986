package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tpurun/internal/testutil"
)

// workerEnv reads what the env verb's worker of rank wrote: its environment as a map.
func workerEnv(t *testing.T, dir string, rank string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "env-"+rank+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Env []string }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range got.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// TestMissingTMPDIRFallsBack: TMPDIR names a directory that does not exist. tpurun's own temporary files go to
// /tmp, with a warning naming TMPDIR, and the job runs (exit 0, as under torchrun; it was exit 70); the workers get
// TMPDIR as the user set it.
func TestMissingTMPDIRFallsBack(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	r := runCLI(t, dir, []string{"TMPDIR=" + missing, testutil.Fake("env")}, "--nprocs", "2", "--", self(t))
	if r.code != 0 || !strings.Contains(r.stderr, "TMPDIR="+missing) {
		t.Fatalf("exit %d, stderr %q; want 0 and a warning naming TMPDIR=%s", r.code, r.stderr, missing)
	}
	for _, rank := range []string{"0", "1"} {
		if got := workerEnv(t, dir, rank)["TMPDIR"]; got != missing {
			t.Errorf("rank %s: TMPDIR=%q, want the user's %q", rank, got, missing)
		}
	}
}

// TestProgramOnRelativePATH: PROGRAM found through a relative PATH entry (./bin, an empty entry, a trailing ':')
// runs, as a shell, execvp and torchrun run it (it was exit 126: Go's exec.ErrDot).
func TestProgramOnRelativePATH(t *testing.T) {
	t.Parallel()
	prog := self(t)
	for name, path := range map[string]string{
		"dot-bin":  "./bin:" + os.Getenv("PATH"),
		"trailing": os.Getenv("PATH") + ":",
		"empty":    "/nonexistent::" + os.Getenv("PATH"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			cwd := t.TempDir()
			sub := cwd
			if strings.HasPrefix(path, "./bin:") {
				sub = filepath.Join(cwd, "bin")
			}
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(prog, filepath.Join(sub, "tpurun-relpath-worker")); err != nil {
				t.Fatal(err)
			}
			cmd, out, errb := tpurun(dir, []string{"PATH=" + path, testutil.Fake("env")}, "--nprocs", "2", "--", "tpurun-relpath-worker")
			cmd.Dir = cwd
			if code := testutil.WaitExit(t, cmd); code != 0 {
				t.Fatalf("PATH=%s: exit %d, want 0\nstdout: %s\nstderr: %s", path, code, out, errb)
			}
			if _, err := os.Stat(filepath.Join(dir, "env-1.json")); err != nil {
				t.Fatalf("the workers did not run: %v", err)
			}
		})
	}
}

// TestOuterLauncherTaskIdentityDropped: tpurun runs as one task of an outer launcher (a Slurm step, mpirun, Hydra,
// jsrun). The outer task's identity (its rank, local rank, pid, and the sizes that go with them) never reaches a
// worker, which would otherwise take itself for that task in JAX's, Lightning's, accelerate's or MPI's detection;
// what describes the job or the node stays.
func TestOuterLauncherTaskIdentityDropped(t *testing.T) {
	t.Parallel()
	dropped := []string{"SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_TASK_PID=4242",
		"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_NODE_RANK=1", "OMPI_COMM_WORLD_SIZE=8",
		"OMPI_COMM_WORLD_LOCAL_SIZE=4", "OMPI_MCA_ess_base_vpid=5", "OMPI_MCA_orte_hnp_uri=1234.0;tcp://10.0.0.1:4000",
		"PMI_RANK=5", "PMI_SIZE=8", "PMI_FD=7", "PMIX_RANK=5", "PMIX_ID=job.5", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=4",
		"MV2_COMM_WORLD_RANK=5", "MV2_COMM_WORLD_LOCAL_RANK=1", "JSM_NAMESPACE_RANK=5", "JSM_NAMESPACE_LOCAL_RANK=1",
		"JSM_NAMESPACE_SIZE=8", "PALS_RANKID=5", "PALS_LOCAL_RANKID=1"}
	kept := []string{"SLURM_JOB_ID=77", "SLURM_NTASKS=8", "SLURM_CPUS_ON_NODE=16", "SLURM_STEP_ID=0", "PMIX_NAMESPACE=job",
		"OMPI_MCA_btl=self,tcp", "LSB_JOBID=9"}
	dir := testutil.FakeDir(t)
	r := runCLI(t, dir, append(append([]string{testutil.Fake("env")}, dropped...), kept...), "--nprocs", "2", "--", self(t))
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	for _, rank := range []string{"0", "1"} {
		env := workerEnv(t, dir, rank)
		for _, kv := range dropped {
			k, _, _ := strings.Cut(kv, "=")
			if v, ok := env[k]; ok {
				t.Errorf("rank %s got the outer task's %s=%s", rank, k, v)
			}
		}
		for _, kv := range kept {
			k, v, _ := strings.Cut(kv, "=")
			if env[k] != v {
				t.Errorf("rank %s: %s=%q, want the job-wide %q passed on", rank, k, env[k], v)
			}
		}
		if env["RANK"] != rank {
			t.Errorf("rank %s: RANK=%q", rank, env["RANK"])
		}
	}
}
