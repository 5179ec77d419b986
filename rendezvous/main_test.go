package rendezvous_test

import (
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
)

// The test binary doubles as a node process (rdzvtest.NodeVerb), as an etcd server process
// (TestEtcdProcessKilled's etcd) and as node 0 of a multislice job (the moonshot row's server host).
func init() {
	testutil.Define(rdzvtest.NodeVerb)
	testutil.Define(etcdtest.ProcessVerb)
	testutil.Define(testutil.Verb{Name: "slicehost", Run: sliceHostVerb})
}

func TestMain(m *testing.M) { rdzvtest.Main(m) }
