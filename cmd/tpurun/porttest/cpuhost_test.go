package porttest_test

import (
	"testing"

	"tpurun/cmd/tpurun/porttest"
)

func TestMain(m *testing.M) { porttest.Main(m) }

// TestPyTorchLauncherTestsCPUHost runs every ported case on a host without accelerators.
func TestPyTorchLauncherTestsCPUHost(t *testing.T) { porttest.Run(t, "cpu", 0) }
