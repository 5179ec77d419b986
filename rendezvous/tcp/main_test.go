package tcp

import (
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
)

// The test binary doubles as a server process (rdzvserver, childServer).
func init() {
	testutil.Define(testutil.Verb{Name: "rdzvserver", Run: childServer})
}

func TestMain(m *testing.M) { rdzvtest.Main(m) }
