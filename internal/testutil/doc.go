// Package testutil is the shared test plumbing of tpurun's tests (launcher, cmd/tpurun, rendezvous,
// results, proc). Like net/http/httptest it is for tests only. It owns:
//
//   - time: one scale knob (TPURUN_TEST_SCALE, default 1) and one generous deadline derived from it (Deadline,
//     Scaled) that every wait of every test uses;
//   - waits for events, never sleeps: WaitFor and Eventually (a condition), Buffer.WaitFor (a line written),
//     WaitForFile, WaitListening (a port), WaitGone and WaitDead (a process), WaitReady (fake workers set up);
//   - Need: a test that needs a tool or a privilege the machine lacks fails under CI=true and otherwise skips
//     saying "SKIPPED, NOT PASSED";
//   - Heavy: a limiter shared by the package test binaries of one go test run (a file lock named for it), so
//     that two resource-heavy tests (an embedded etcd, a world of many nodes, a flood, a memory figure) never
//     starve each other;
//   - the fake worker: the test binary re-executed as a worker process doing one registered verb (Register,
//     Fake, Dispatch, Run), with an os/exec-style registry in which a verb that no test uses fails the suite;
//   - Buffer, a bytes.Buffer safe for concurrent writers, and FreeEndpoint.
//
// Every test-plumbing package is under internal/testutil, each apart so that a test binary links only what it
// uses: etcdtest (an embedded or Debian's etcd), rdzvtest (worlds of rendezvous nodes), fakeworker (the fake worker
// as a binary of its own), k8stest (the pods a JobSet makes), dockertest (a Dockerfile run without Docker) and
// porttest (PyTorch's own launcher tests, ported to the tpurun binary).
package testutil
