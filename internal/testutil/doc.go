// Package testutil is the one test-plumbing package of tpurun's tests (launcher, cmd/tpurun, rendezvous,
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
// Embedded etcd lives in tpurun/internal/testutil/etcdtest, so that a test binary that needs none does not link its
// server.
package testutil
