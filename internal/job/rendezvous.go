package job

import (
	"context"
	"errors"
	"fmt"
	"net"

	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/setting"
	"tpurun/rendezvous"
)

// rendezvousErr marks a rendezvous failure as failure.ErrRendezvous (exit 69), keeping configuration errors as they are
// (exit 2).
func rendezvousErr(step string, err error) error {
	if exitcode.IsUsage(err) {
		return err
	}
	var se *failure.SignalError
	if errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, rendezvous.ErrJobClosed) {
		return err
	}
	if errors.Is(err, rendezvous.ErrDuplicateNode) {
		return fmt.Errorf("%w: %s: %w; if two tpurun agents share this host, give each its own --node-name (or --node-rank)", failure.ErrRendezvous, step, err)
	}
	if errors.Is(err, rendezvous.ErrUnresolved) { // waited for within the join timeout: pods appear in DNS as they start
		return fmt.Errorf("%w: %s: %w; check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)", failure.ErrRendezvous, step, err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound { // etcd's endpoints
		return &failure.ConfigError{Field: setting.RendezvousEndpoint, Value: dns.Name,
			Hint: "this host name does not resolve (no such host); check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)"}
	}
	return fmt.Errorf("%w: %s: %w", failure.ErrRendezvous, step, err)
}
