package etcd

import (
	"context"
	"time"

	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// Name is the backend's name (Config.Backend); torchrun's older etcd backend is etcd-v2.
const Name = "etcd"

// The backend registers itself when a program links the package.
var _ = rendezvous.Register(rendezvous.Registration{Name: Name, Aliases: []string{"etcd-v2"}, Backend: backend{}})

// backend is torchrun's etcd rendezvous: an elastic world met on a real etcd v3 cluster, without a leader.
type backend struct{}

func (backend) Solo() bool                         { return false }
func (backend) Elastic() bool                      { return true }
func (backend) NeedsHosts(*rendezvous.Config) bool { return false }
func (backend) NamesNodes(*rendezvous.Config) bool { return false }
func (backend) Port() int                          { return 2379 }
func (backend) HostsServer() bool                  { return false }

func (backend) Open(ctx context.Context, cfg *rendezvous.Config, log *zap.Logger, linger time.Duration) (rendezvous.Store, error) {
	e, err := newEtcd(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	e.jobTTL = ttlOf(max(linger, nodeTTL(cfg.Heartbeat)))
	return e, nil
}
