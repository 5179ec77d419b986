// Package etcd is torchrun's etcd rendezvous ("etcd", alias "etcd-v2"): an elastic world met on a real etcd v3
// cluster, without a leader. It owns the job instance (job.go), a node's session and its watches (session.go),
// the forming of a world (forming.go, world.go), barriers and the exchange (barrier.go), the one lease keeper
// (lease.go) and the retry of etcd's elections (retry.go). The keys are described in the rendezvous package's doc.
// The package registers itself; the launcher imports it (internal/host/host.go).
package etcd
