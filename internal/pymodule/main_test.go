package pymodule

import (
	"fmt"
	"os"
	"testing"
)

// envTestMode makes the test binary play a process of the test instead of running the tests.
const envTestMode = "TPURUN_PYMODULE_TEST_MODE"

func TestMain(m *testing.M) {
	switch os.Getenv(envTestMode) {
	case "":
		os.Exit(m.Run())
	case "pythonpath": // one of several launchers installing the module at once
		dir, err := Path(os.Getenv("PYTHONPATH_DIR"), "")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(dir)
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: unknown mode\n", envTestMode, os.Getenv(envTestMode))
		os.Exit(70)
	}
}
