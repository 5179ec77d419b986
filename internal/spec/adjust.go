package spec

import "context"

// adjustKey is the context key of WithAdjust's function.
type adjustKey struct{}

// WithAdjust returns ctx carrying fn, which package launcher's Run and Plan apply to the Spec they convert the
// public one into, after the conversion and before any check or default: the route by which tpurun's command line
// and the tests set what the public Spec leaves out (detection's roots, where NProcs came from, a ready Plan). An
// adjustment already in ctx runs first.
func WithAdjust(ctx context.Context, fn func(*Spec)) context.Context {
	if prev := adjustOf(ctx); prev != nil {
		next := fn
		fn = func(s *Spec) { prev(s); next(s) }
	}
	return context.WithValue(ctx, adjustKey{}, fn)
}

// Adjust applies the adjustment ctx carries (WithAdjust) to s, if any.
func Adjust(ctx context.Context, s *Spec) {
	if fn := adjustOf(ctx); fn != nil {
		fn(s)
	}
}

func adjustOf(ctx context.Context) func(*Spec) {
	fn, _ := ctx.Value(adjustKey{}).(func(*Spec))
	return fn
}
