//go:build !etcd

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
)

// etcdBinary is the build of tpurun that links the etcd backend (go build -tags etcd ./cmd/tpurun), installed
// beside tpurun by make build and the wheel. The default build leaves the etcd client out: its gRPC stack is half of
// the binary and 2 to 7 ms of every start (docs/BENCHMARKS.md, "The etcd client, a binary of its own").
const etcdBinary = "tpurun-etcd"

// etcdBackends are the etcd backend's names (rendezvous/etcd's Name and alias).
var etcdBackends = []string{"etcd", "etcd-v2"}

// handOff replaces this process by tpurun-etcd, found beside the running executable, with the same arguments and
// environment, when the run asks for the etcd backend (backend: --rdzv-backend or PET_RDZV_BACKEND, as parsed);
// nothing has started yet. It returns nil for any other backend, and a *failure.ConfigError (exit 2) when
// tpurun-etcd cannot be run.
func handOff(backend string, args []string) error {
	if !slices.Contains(etcdBackends, backend) {
		return nil
	}
	self, err := os.Executable()
	path := filepath.Join(filepath.Dir(self), etcdBinary)
	if err == nil {
		err = syscall.Exec(path, append([]string{os.Args[0]}, args...), os.Environ())
	}
	return &failure.ConfigError{Field: failure.RendezvousBackend, Value: backend, Hint: fmt.Sprintf("this tpurun leaves the "+
		"etcd client out and hands etcd runs to %s beside it, which cannot be run (%s: %v): build it with make build (or "+
		"go build -tags etcd -o %s ./cmd/tpurun), or install the tpurun wheel, which ships both", etcdBinary, path, err, path)}
}

// backendNames says the backends --rdzv-backend takes, for its help text.
func backendNames() string {
	return "etcd (etcd-v2; run by " + etcdBinary + "), " + cli.RendezvousBackends()
}
