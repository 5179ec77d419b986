package rdzvtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tpurun/internal/testutil"
)

// Main is the TestMain of a rendezvous package: the test binary runs a verb when it was re-executed as one
// (testutil.Dispatch), else its tests, then checks that they leaked no goroutine, and exits.
func Main(m *testing.M) {
	testutil.Dispatch()
	code := testutil.Run(m)
	if code == 0 {
		// the in-process etcd members (etcdtest) leave idle HTTP peer connections of their own behind; the
		// rendezvous packages use no net/http, so those are not theirs.
		err := goleak.Find(
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
