package static

import (
	"testing"

	"tpurun/internal/testutil/rdzvtest"
)

func TestMain(m *testing.M) { rdzvtest.Main(m) }
