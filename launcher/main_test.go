package launcher_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tpurun/internal/testutil"
	_ "tpurun/rendezvous/etcd" // worlds on etcd: a program that runs one imports the backend, as a library user does
)

// The test binary doubles as the fake worker: the verbs of testutil that this package's tests use.
func init() {
	testutil.Register("exit", "exitready", "hang", "raise", "ignore", "catch", "child", "childsetsid", "childclean",
		"lines", "env", "failuntil", "record", "report", "result")
}

func TestMain(m *testing.M) {
	testutil.Dispatch()
	if err := testutil.SetSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testutil.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
