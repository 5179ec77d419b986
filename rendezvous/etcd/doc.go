// Package etcd is torchrun's etcd rendezvous ("etcd", alias "etcd-v2"): an elastic world met on a real etcd v3
// cluster, without a leader. It offers the job instance and its lease, a node's session and its watches, the
// forming of a world, barriers and the exchange, the one lease keeper of a node and the retry of etcd's elections.
// It does not own the agreement itself (ranks, checks, shares: the kit the rendezvous backends share) nor the API
// a program calls (package rendezvous, whose doc describes the keys). The package registers itself when a program
// imports it.
package etcd
