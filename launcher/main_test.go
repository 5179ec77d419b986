package launcher_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tpurun/launcher/launchertest"
)

// The test binary doubles as the fake worker (launchertest.FakeWorker).
func TestMain(m *testing.M) {
	launchertest.RunFakeWorker()
	if err := launchertest.SetSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}
