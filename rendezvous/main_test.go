package rendezvous_test

import (
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
)

// The test binary doubles as a node process (rdzvtest.NodeVerb) and as an etcd server process
// (TestEtcdProcessKilled's etcd).
func init() {
	testutil.Define(rdzvtest.NodeVerb)
	testutil.Define(etcdtest.ProcessVerb)
}

func TestMain(m *testing.M) { rdzvtest.Main(m) }
