package hostview

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"tpurun/launcher"
)

// twoNodePlan is a plan of 2 nodes of 4 workers each, as a v4-16 slice's, with the env a worker checks.
func twoNodePlan() *launcher.DryRun {
	p := &launcher.DryRun{Device: "tpu", Nodes: []launcher.PlannedNode{{Rank: 0, Host: "ip0", LocalWorkers: 4}, {Rank: 1, Host: "ip1", LocalWorkers: 4}}}
	for r := range 8 {
		p.Workers = append(p.Workers, launcher.PlannedWorker{Rank: r, LocalRank: r % 4, NodeRank: r / 4, Replicas: []int{r},
			Env: map[string]string{"CLOUD_TPU_TASK_ID": strconv.Itoa(r), "TPU_PROCESS_BOUNDS": "2,2,2"}})
	}
	return p
}

// TestPlanOutput: the JSON and the table show every node and worker with its env, secrets redacted, and leave the
// plan itself as it was.
func TestPlanOutput(t *testing.T) {
	t.Parallel()
	p := twoNodePlan()
	p.Workers[0].Env["HF_TOKEN"] = "hf_abc"
	p.Workers[0].Env["MEGASCALE_SECRET_KEY"] = "s3cr3t"

	var js bytes.Buffer
	must(t, WritePlanJSON(&js, p))
	var doc struct {
		Nodes []struct {
			Rank int    `json:"rank"`
			Host string `json:"host"`
		} `json:"nodes"`
		Workers []struct {
			Rank      int               `json:"rank"`
			LocalRank int               `json:"local_rank"`
			NodeRank  int               `json:"node_rank"`
			Replicas  []int             `json:"replicas"`
			Env       map[string]string `json:"env"`
		} `json:"workers"`
	}
	must(t, json.Unmarshal(js.Bytes(), &doc))
	if len(doc.Nodes) != 2 || doc.Nodes[1].Host != "ip1" || len(doc.Workers) != 8 || doc.Workers[4].NodeRank != 1 ||
		doc.Workers[4].Env["CLOUD_TPU_TASK_ID"] != "4" || doc.Workers[5].Replicas[0] != 5 {
		t.Fatalf("json %s", js.String())
	}
	if doc.Workers[0].Env["HF_TOKEN"] != Redacted || strings.Contains(js.String(), "s3cr3t") {
		t.Errorf("secrets not redacted in json")
	}
	if p.Workers[0].Env["HF_TOKEN"] != "hf_abc" {
		t.Errorf("redaction changed the plan itself")
	}

	var tab bytes.Buffer
	must(t, WritePlanTable(&tab, p))
	s := tab.String()
	if strings.Contains(s, "hf_abc") || strings.Contains(s, "s3cr3t") || !strings.Contains(s, "HF_TOKEN="+Redacted) {
		t.Errorf("table leaks secrets:\n%s", s)
	}
	for _, want := range []string{"ip1", "TPU_PROCESS_BOUNDS=2,2,2", "CLOUD_TPU_TASK_ID=7"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestIsSecret(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{"HF_TOKEN": true, "aws_secret_access_key": true, "WANDB_API_KEY": true, "DB_PASSWORD": true,
		"TPU_PROCESS_PORT": false, "PATH": false, "MASTER_ADDR": false} {
		if IsSecret(name) != want {
			t.Errorf("IsSecret(%s) = %v", name, !want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
