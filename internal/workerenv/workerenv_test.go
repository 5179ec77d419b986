package workerenv_test

import (
	"strings"
	"testing"

	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
)

func TestWorkerEnvOverridesAndStripsInheritedPerRankValues(t *testing.T) {
	plan, err := topology.CPUPlan(4)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"RANK=9", "LOCAL_RANK=9", "TPU_VISIBLE_CHIPS=0,1", "CLOUD_TPU_TASK_ID=5", "PATH=/bin",
		"PJRT_DEVICE=TPU", "OMP_NUM_THREADS=8", "=junk", "NOEQUALS"}
	env := workerenv.For(base, plan, plan.Workers[2], workerenv.Runtime{RunID: "r", MasterAddr: "h", MasterPort: 1234})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Fatalf("%s twice", k)
		}
		got[k] = v
	}
	for k, v := range map[string]string{"RANK": "2", "LOCAL_RANK": "2", "PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "8",
		"PATH": "/bin", "MASTER_PORT": "1234", "MASTER_ADDR": "h", "TPURUN_REPLICAS": "2", "ROLE_NAME": "default"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"TPU_VISIBLE_CHIPS", "CLOUD_TPU_TASK_ID", "TORCHELASTIC_ERROR_FILE", "", "NOEQUALS"} {
		if _, ok := got[k]; ok {
			t.Errorf("%q passed through from the parent", k)
		}
	}
	one, _ := topology.CPUPlan(1)
	for _, kv := range workerenv.For(nil, one, one.Workers[0], workerenv.Runtime{}) {
		if strings.HasPrefix(kv, "OMP_NUM_THREADS=") {
			t.Errorf("OMP_NUM_THREADS set for a single worker: %s", kv)
		}
	}
}

func TestExpandArgs(t *testing.T) {
	got := workerenv.ExpandArgs([]string{"--dev=${local_rank}", "${local_rank}${local_rank}", "$local_rank"}, 3)
	if strings.Join(got, " ") != "--dev=3 33 $local_rank" {
		t.Fatalf("got %q", got)
	}
}
