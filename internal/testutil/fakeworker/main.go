// Command fakeworker is testutil's fake worker as a program of its own: every built-in verb (testutil.Register's),
// selected by the environment as in a test binary (FAKE_VERB, TPURUN_FAKE_<RANK>, TPURUN_FAKE). testutil.Program
// builds it once per test binary, without the race detector and without the test binary's packages: a test binary
// re-executed as a worker spent a quarter of a CPU-second starting (the race runtime, and the init functions of
// everything it links: an embedded etcd, k8s.io/api), this one a hundredth, and the suite starts a thousand workers.
// A verb a package defines for itself (testutil.Define) runs only in that package's test binary
// (testutil.Executable); named here, it exits 98 saying so.
package main

import "tpurun/internal/testutil"

func main() { testutil.DispatchBuiltin() }
