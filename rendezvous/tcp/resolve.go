package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// An endpoint named by a host name that does not resolve yet is waited for, within the join timeout: on GKE a pod
// is published in its headless service only as it starts, so the nodes of a JobSet that start first, node 0's
// own included, find the endpoint's name unknown for a while. The node hosting the server waits for its own name
// before binding (resolved); a node connecting to it retries its dial (dial). Each logs one line when the
// name first fails to resolve, not one per try, and gives up at the join timeout with an ErrUnresolved error (an
// ErrTimeout) naming the endpoint, how long it tried and the resolver's last answer.

// unresolved reports whether err is a failure to resolve a host name (not found, or the resolver unreachable or
// slow: in both cases the name may resolve later).
func unresolved(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// resolveBackoff bounds the wait between two lookups of a name that did not resolve.
const resolveBackoff = time.Second

// resolved returns endpoint with its host resolved to an address (the first IPv4 one when there is one, as
// net.Listen picks), waiting until the name resolves, ctx ends or timeout passes. An IP address or an empty host
// is returned as is. who says, for the error, who serves there.
func resolved(ctx context.Context, r *net.Resolver, endpoint string, timeout time.Duration, who string, log *zap.Logger) (string, error) {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil || host == "" {
		return endpoint, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return endpoint, nil
	}
	start := time.Now()
	backoff := 20 * time.Millisecond
	for tries := 1; ; tries++ {
		addrs, err := r.LookupNetIP(ctx, "ip", host)
		if err == nil && len(addrs) > 0 {
			if tries > 1 {
				log.Debug("rendezvous endpoint resolved", zap.String("endpoint", endpoint), zap.Duration("after", time.Since(start)))
			}
			return net.JoinHostPort(pick(addrs).String(), port), nil
		}
		if err == nil {
			err = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
		if !unresolved(err) {
			return "", err
		}
		if tries == 1 {
			log.Info("rendezvous endpoint does not resolve yet; waiting for it (a pod is published in its headless service as it starts)",
				zap.String("endpoint", endpoint), zap.Duration("timeout", timeout), zap.Error(err))
		}
		left := timeout - time.Since(start)
		if left <= 0 {
			return "", unresolvedErr(endpoint, time.Since(start), tries, err, who)
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("rendezvous: waiting for the endpoint %s to resolve: %w", endpoint, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, resolveBackoff)
	}
}

// pick is the address net.Listen would bind for a name: the first IPv4 address, else the first.
func pick(addrs []netip.Addr) netip.Addr {
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap()
		}
	}
	return addrs[0]
}

// unresolvedErr is the ErrUnresolved error (an ErrTimeout) of an endpoint whose name did not resolve for as long as
// a node waited.
func unresolvedErr(endpoint string, waited time.Duration, tries int, last error, who string) *rendezvous.Error {
	return &rendezvous.Error{Kind: rendezvous.ErrUnresolved, Field: string(failure.RendezvousEndpoint), Value: endpoint,
		Detail: fmt.Sprintf("its host name did not resolve within %s (%d lookups; the last: %v); %s: check the name, and that DNS publishes it (a pod's name, once the pod has started, in its headless service)",
			waited.Round(time.Millisecond), tries, last, who)}
}
