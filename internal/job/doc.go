// Package job owns a job: Run checks its Spec, has the host prepared (package host), then runs generations
// (generation.go): join the world through the rendezvous, plan it, meet at a barrier, run one attempt of the local
// workers (package attempt), collect their results (results.go), agree on the outcome with the other nodes
// (outcome.go), and restart the whole world after a failure while restarts are left. The job's verdict and the
// Report with its root cause (report.go) come last; errors that end a job outside an attempt become verdicts in
// verdict.go, a rendezvous's failures in rendezvous.go.
package job
