package launcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"tpurun/launcher"
)

// TestPlanReadsSpecEnv: Plan detects through Spec.Env as Run does. The Env names a fake host with two H100s
// (TPURUN_SYSFS_ROOT, TPURUN_DEV_ROOT); this machine has none, so a Plan that read this process's environment
// would plan the CPU.
func TestPlanReadsSpecEnv(t *testing.T) {
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	for i := range 2 {
		d := filepath.Join(sys, "bus", "pci", "devices", fmt.Sprintf("0000:%02x:00.0", i+0x18))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"vendor": "0x10de", "device": "0x2330", "class": "0x030200"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, fmt.Sprintf("nvidia%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := launcher.Plan(context.Background(), launcher.Spec{RunID: "job",
		Env: []string{"TPURUN_SYSFS_ROOT=" + sys, "TPURUN_DEV_ROOT=" + dev, "PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Device != "gpu" || len(d.Workers) != 2 {
		t.Fatalf("Plan found %s with %d workers, want gpu with 2: it did not detect through Spec.Env", d.Device, len(d.Workers))
	}
}
