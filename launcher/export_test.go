package launcher

import (
	"context"

	"tpurun/internal/job"
	"tpurun/internal/spec"
)

// RunInternal runs the internal Spec with Run's error (the public ErrConfig and WorkerError in its chain) and the
// internal report: the route of the tests that set what the public Spec leaves out (a ready plan, the roots, the
// signal channel) and read what the public Report leaves out.
func RunInternal(ctx context.Context, s spec.Spec) (*spec.Report, error) {
	rep, err := job.Run(ctx, s)
	return rep, errorOf(err)
}

// InternalObserverFunc adapts a function to the internal spec.Observer, for the tests that run the internal Spec
// (RunInternal).
type InternalObserverFunc func(spec.Event)

// Observe calls f(e).
func (f InternalObserverFunc) Observe(e spec.Event) { f(e) }
