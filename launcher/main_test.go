package launcher_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tpurun/launcher/launchertest"
)

// The test binary doubles as the fake worker (launchertest.FakeWorker) and as an etcd server of its own
// (launchertest.StartEtcdProcess).
func TestMain(m *testing.M) {
	launchertest.RunFakeWorker()
	launchertest.RunEtcdChild()
	if err := launchertest.SetSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}
