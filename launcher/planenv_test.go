package launcher_test

import (
	"context"
	"os"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/launcher"
)

// TestPlanReadsSpecEnv: Plan detects through Spec.Env as Run does. The Env names a fake host with two H100s
// (TPURUN_SYSFS_ROOT, TPURUN_DEV_ROOT); this machine has none, so a Plan that read this process's environment
// would plan the CPU.
func TestPlanReadsSpecEnv(t *testing.T) {
	sys, dev := testutil.FakePCIHost(t, testutil.H100Functions, 2)
	d, err := launcher.Plan(context.Background(), launcher.Spec{RunID: "job",
		Env: []string{"TPURUN_SYSFS_ROOT=" + sys, "TPURUN_DEV_ROOT=" + dev, "PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Device != "gpu" || len(d.Workers) != 2 {
		t.Fatalf("Plan found %s with %d workers, want gpu with 2: it did not detect through Spec.Env", d.Device, len(d.Workers))
	}
}
