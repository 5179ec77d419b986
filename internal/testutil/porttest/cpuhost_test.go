package porttest_test

import (
	"testing"

	"tpurun/internal/testutil/porttest"
)

func TestMain(m *testing.M) { porttest.Main(m) }

// TestPyTorchLauncherTestsCPUHost runs every ported case on a host without accelerators.
func TestPyTorchLauncherTestsCPUHost(t *testing.T) { porttest.Run(t, "cpu", 0) }

// TestPyTorchLauncherTestsGPUHost runs the cases whose outcome depends on the host on one with one GPU, fewer than
// those cases ask for (tpurun refused that before issue 24).
func TestPyTorchLauncherTestsGPUHost(t *testing.T) { porttest.Run(t, "gpu", 1) }
