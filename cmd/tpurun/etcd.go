//go:build etcd

package main

import (
	"tpurun/cmd/tpurun/internal/cli"
	_ "tpurun/rendezvous/etcd" // this build, tpurun-etcd, runs the etcd backend itself
)

// handOff is nil: this build links every backend and runs the job itself.
func handOff(string, []string) error { return nil }

// backendNames says the backends --rdzv-backend takes, for its help text.
func backendNames() string { return cli.RendezvousBackends() }
