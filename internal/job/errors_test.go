package job_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/internal/job"
	"tpurun/internal/spec"
)

// TestRunErrorsMatchTheirCategory: what Run returns is what a Go caller is told it is. Every configuration error,
// whichever layer finds it (the Spec's own check, detection, the plan, the rendezvous's), matches failure.ErrConfig
// and exits 2, before anything starts; a caller's context deadline exits 124 (as --timeout), its cancel 143 (as a
// SIGTERM), never 70. These were the review's measured cases: only the first matched ErrConfig, a deadline exited 70.
func TestRunErrorsMatchTheirCategory(t *testing.T) {
	base := func() spec.Spec {
		s := spec.Spec{Options: attempt.Options{Program: []string{"/bin/sleep", "10"}}}
		s.Detect.Device = "cpu"
		s.Request.NProcs = 1
		return s
	}
	for name, bad := range map[string]func(*spec.Spec){
		"negative grace":     func(s *spec.Spec) { s.Grace = -1 },
		"unknown device":     func(s *spec.Spec) { s.Detect.Device = "xpu" },
		"negative nprocs":    func(s *spec.Spec) { s.Request.NProcs = -3 },
		"tcp without nnodes": func(s *spec.Spec) { s.Rendezvous.Backend = "tcp" },
		"unknown backend":    func(s *spec.Spec) { s.Rendezvous.Backend = "bogus" },
	} {
		s := base()
		bad(&s)
		start := time.Now()
		_, err := job.Run(context.Background(), s)
		if !errors.Is(err, failure.ErrConfig) || failure.ExitCode(err) != failure.ExitUsage || time.Since(start) > 5*time.Second {
			t.Errorf("%s: %T %v: errors.Is(ErrConfig) %v, exit %d after %s; want true, 2, before anything started", name, err,
				err, errors.Is(err, failure.ErrConfig), failure.ExitCode(err), time.Since(start))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := job.Run(ctx, base()); !errors.Is(err, context.DeadlineExceeded) || failure.ExitCode(err) != failure.ExitTimeout {
		t.Errorf("a caller's deadline: %T %v, exit %d; want context.DeadlineExceeded, %d", err, err, failure.ExitCode(err), failure.ExitTimeout)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := job.Run(ctx, base()); !errors.Is(err, context.Canceled) || failure.ExitCode(err) != 143 {
		t.Errorf("a caller's cancel: %T %v, exit %d; want context.Canceled, 143", err, err, failure.ExitCode(err))
	}
}
