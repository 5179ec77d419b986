package job

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"tpurun/internal/failure"
	"tpurun/internal/stop"
	"tpurun/rendezvous"
)

// verdictOf is the verdict of an error that ended a job outside an attempt (a join that failed, a start that
// never happened): a verdict already is one; anything else is wrapped with the code and the reason it maps to.
func verdictOf(err error) *stop.Verdict {
	if err == nil {
		return nil
	}
	var v *stop.Verdict
	if errors.As(err, &v) {
		return v
	}
	v = &stop.Verdict{Reason: stop.Done, Code: failure.ExitCode(err), Node: -1, Err: err}
	var se *failure.SignalError
	switch {
	case errors.As(err, &se):
		v.Reason = stop.Signal
	case errors.Is(err, failure.ErrTimeout):
		v.Reason = stop.Timeout
	case errors.Is(err, context.Canceled):
		v.Reason = stop.Canceled
	case errors.Is(err, rendezvous.ErrNodeLost):
		v.Reason = stop.Lost
	}
	return v
}

// causeOf is the cause of a rendezvous session's news: the store lost (job-wide: 69 naming its endpoint), another
// node lost, or failed or stopped.
func causeOf(f rendezvous.Failure) *stop.Cause {
	if f.Store {
		return stop.ErrCause(stop.Store, fmt.Errorf("%w: %w: %s", failure.ErrRendezvous, rendezvous.ErrStoreLost, f.Reason))
	}
	if f.Lost {
		return &stop.Cause{Reason: stop.Lost, Signal: syscall.SIGTERM, Node: f.Node.Rank,
			Err: fmt.Errorf("%w: %w: %s", failure.ErrRendezvous, rendezvous.ErrNodeLost, f)}
	}
	return &stop.Cause{Reason: stop.Remote, Signal: syscall.SIGTERM, Node: f.Node.Rank, Message: f.Reason}
}

// rendezvousErr marks a rendezvous failure as failure.ErrRendezvous (exit 69), keeping configuration errors as they are
// (exit 2).
func rendezvousErr(step string, err error) error {
	if errors.Is(err, failure.ErrConfig) {
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
		return &failure.ConfigError{Field: failure.RendezvousEndpoint, Value: dns.Name,
			Hint: "this host name does not resolve (no such host); check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)"}
	}
	return fmt.Errorf("%w: %s: %w", failure.ErrRendezvous, step, err)
}
