// Package etcd is torchrun's etcd rendezvous ("etcd", alias "etcd-v2"): an elastic world met on a real etcd v3
// cluster, without a leader. It offers a job instance under a run id, a node's session in each generation (one
// lease keeper tying its keys to its liveness, and the watches that tell it what every node must hear), the forming
// of a world without every node hearing every other, barriers, the exchange of data, and the retry of what etcd's
// leader elections interrupt.
//
// It does not own the agreement itself (ranks, checks, shares) nor the layout of the keys, both described in the
// rendezvous package's doc, nor etcd: it is a client of a running cluster (TLS included). The package registers
// itself under Name, and the launcher imports it for that side effect.
package etcd
