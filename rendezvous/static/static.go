// Package static is torchrun's static rendezvous: a fixed world laid out by the launch (node count, node ranks
// and, without an endpoint, node 0's host from the host list), met on the embedded server of package tcp that node
// 0 hosts. It registers itself as "static" when a program imports it.
package static

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
	"tpurun/rendezvous/tcp"
)

// Name is the backend's name (Config.Backend).
const Name = "static"

// The backend registers itself when a program links the package.
var _ = rendezvous.Register(rendezvous.Registration{Name: Name, Backend: backend{}})

// backend is the static rendezvous.
type backend struct{}

func (backend) Solo() bool        { return false }
func (backend) Elastic() bool     { return false }
func (backend) Port() int         { return rendezvous.DefaultPort }
func (backend) HostsServer() bool { return true }

func (backend) NeedsHosts(cfg *rendezvous.Config) bool { return cfg.NodeRank < 0 || cfg.Endpoint == "" }

func (backend) NamesNodes(cfg *rendezvous.Config) bool { return cfg.Endpoint == "" }

// Open prepares the static backend: node rank and host list from cfg; node 0 hosts the server.
func (backend) Open(ctx context.Context, c *rendezvous.Config, log *zap.Logger, linger time.Duration) (rendezvous.Store, error) {
	if err := world(c); err != nil {
		return nil, err
	}
	endpoint := c.Endpoint
	if endpoint == "" {
		if len(c.Hosts) == 0 {
			return nil, agree.ConfigError(failure.RendezvousEndpoint, "", "static rendezvous without a host list needs an endpoint (node 0's host:port)")
		}
		endpoint = net.JoinHostPort(c.Hosts[0], tcp.PortOption(c))
	}
	t := tcp.NewStore(c, log, endpoint, c.Hosts, linger)
	if err := t.CheckEndpoint(c.NodeRank == 0 && c.NNodes == 1); err != nil {
		return nil, err
	}
	if c.NodeRank == 0 {
		if err := t.Host(ctx, true); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// world checks the fixed world of a static rendezvous and completes it: this node's rank, the node count
// (from the host list when 0) and no smaller minimum.
func world(c *rendezvous.Config) error {
	if c.MinNodes != 0 && c.MinNodes != c.NNodes {
		return agree.ConfigError(failure.RendezvousMinNodes, strconv.Itoa(c.MinNodes), "the static backend has a fixed node count; use tcp or etcd for an elastic world")
	}
	hosts := c.Hosts
	if c.NodeRank < 0 {
		return agree.ConfigError(failure.RendezvousNodeRank, "", "a static rendezvous needs this node's rank (TPU_WORKER_ID, SLURM_NODEID or JOB_COMPLETION_INDEX give it to tpurun)")
	}
	if len(hosts) > 0 {
		if c.NNodes == 0 {
			c.NNodes = len(hosts)
		}
		if c.NNodes != len(hosts) {
			return agree.ConfigError(failure.RendezvousNodes, strconv.Itoa(c.NNodes), fmt.Sprintf("the host list has %d hosts (%s)", len(hosts), strings.Join(hosts, ",")))
		}
	}
	if c.NNodes == 0 {
		return agree.NewError(rendezvous.ErrConfig, "static rendezvous needs a node count or a host list (tpurun takes one from TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST or the hosts option)")
	}
	if c.NodeRank >= c.NNodes {
		return agree.ConfigError(failure.RendezvousNodeRank, strconv.Itoa(c.NodeRank), fmt.Sprintf("there are %d nodes", c.NNodes))
	}
	c.MinNodes = c.NNodes
	return nil
}
