package spec

import "context"

// adjustKey is the context key of WithAdjust's function.
type adjustKey struct{}

// WithAdjust returns ctx carrying fn, which package launcher's Run and Plan apply to the Spec they convert the
// public one into, after the conversion and before any check or default: the route by which tpurun's command line
// sets what the public Spec leaves out (detection's roots, where NProcs came from).
func WithAdjust(ctx context.Context, fn func(*Spec)) context.Context {
	return context.WithValue(ctx, adjustKey{}, fn)
}

// Adjust applies the adjustment ctx carries (WithAdjust) to s, if any.
func Adjust(ctx context.Context, s *Spec) {
	if fn, ok := ctx.Value(adjustKey{}).(func(*Spec)); ok {
		fn(s)
	}
}
