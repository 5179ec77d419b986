// Package gpuhost runs PyTorch's launcher tests (see porttest) on a GPU host: its own test binary, beside the CPU
// host's, so that each fits go test's time limit.
package gpuhost_test

import (
	"testing"

	"tpurun/cmd/tpurun/porttest"
)

func TestMain(m *testing.M) { porttest.Main(m) }

// TestPyTorchLauncherTestsGPUHost runs every ported case on a host with one GPU, fewer than nearly every case asks
// for (tpurun refused that before issue 24); the cases with torch workers under the preloaded interpreter
// (TPURUN_PRELOAD=torch, see porttest).
func TestPyTorchLauncherTestsGPUHost(t *testing.T) { porttest.Run(t, "gpu", 1) }
