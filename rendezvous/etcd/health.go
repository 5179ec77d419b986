package etcd

import "context"

// health is a node's link to the rendezvous store: up until it ends, once and for good, with the reason (the
// store lost, or the session closed). Every wait on the store also waits on it.
type health struct {
	ctx context.Context
	end context.CancelCauseFunc // the first reason counts
}

func newHealth() *health {
	ctx, end := context.WithCancelCause(context.Background())
	return &health{ctx: ctx, end: end}
}

// failed is the reason the link ended, nil while it is up.
func (h *health) failed() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

// bind returns ctx, also cancelled when the link ends.
func (h *health) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}
