package launcher_test

// The tests of this file run the zero Process (no reaper) and are not parallel at the top: a parallel test's Run
// that reaps (Process.Reap) waits for every child of the test binary and would take their workers' ends.

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"tpurun/launcher"
	_ "tpurun/rendezvous/tcp" // the tcp backend, for its configuration errors
)

// TestConfigErrorsMatchErrConfig: every setting refused before anything starts matches ErrConfig and exits 2,
// whichever layer checks it (the Spec's bounds, detection, planning, the rendezvous).
func TestConfigErrorsMatchErrConfig(t *testing.T) {
	base := func() launcher.Spec {
		return launcher.Spec{Program: []string{"true"}, Devices: launcher.Devices{Device: "cpu"}}
	}
	for name, edit := range map[string]func(*launcher.Spec){
		"grace -1":   func(s *launcher.Spec) { s.Grace = -1 },
		"device xpu": func(s *launcher.Spec) { s.Devices.Device = "xpu" },
		"nprocs -3":  func(s *launcher.Spec) { s.Devices.NProcs = -3 },
		"tcp no nnodes": func(s *launcher.Spec) {
			s.Rendezvous = launcher.RendezvousSpec{Backend: "tcp", Endpoint: "127.0.0.1:1"}
		},
		"backend bogus":  func(s *launcher.Spec) { s.Rendezvous.Backend = "bogus" },
		"no program":     func(s *launcher.Spec) { s.Program = nil },
		"bad conf entry": func(s *launcher.Spec) { s.Rendezvous.Conf = []string{"novalue"} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := base()
			edit(&s)
			rep, err := launcher.Run(context.Background(), s)
			t.Log(err)
			if !errors.Is(err, launcher.ErrConfig) || launcher.ExitCode(err) != 2 || rep != nil {
				t.Fatalf("err %v (%T), code %d, report %v; want ErrConfig, exit 2, no report", err, errors.Unwrap(err), launcher.ExitCode(err), rep)
			}
		})
	}
}

// TestWorkerExitIsNoConfigError: a worker that exits 2 fails the job with 2, and its error is the worker's, not
// ErrConfig.
func TestWorkerExitIsNoConfigError(t *testing.T) {
	_, err := launcher.Run(context.Background(), launcher.Spec{
		Program: []string{"/bin/sh", "-c", "exit 2"},
		Devices: launcher.Devices{Device: "cpu"},
	})
	var we *launcher.WorkerError
	if errors.Is(err, launcher.ErrConfig) || launcher.ExitCode(err) != 2 || !errors.As(err, &we) || we.Rank != 0 || we.ExitCode() != 2 {
		t.Fatalf("err %v (code %d), want rank 0's exit 2, not ErrConfig", err, launcher.ExitCode(err))
	}
}

// TestCallerContextEndsTheJob: a caller's deadline stops the workers and is reported as such (exit 124, never
// 70: an internal error); a cancel is context.Canceled (exit 143).
func TestCallerContextEndsTheJob(t *testing.T) {
	s := launcher.Spec{
		Program: []string{"sleep", "60"},
		Devices: launcher.Devices{Device: "cpu", NProcs: 2},
		Grace:   time.Second,
	}
	for _, tc := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		target error
		code   int
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded, 124},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			rep, err := launcher.Run(ctx, s)
			if !errors.Is(err, tc.target) || launcher.ExitCode(err) != tc.code {
				t.Fatalf("err %v, code %d; want %v, %d", err, launcher.ExitCode(err), tc.target, tc.code)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("Run took %s after the context ended", took)
			}
			if rep == nil || rep.Last() == nil || rep.Last().Verdict.Reason != launcher.StopCanceled {
				t.Fatalf("report %+v, want the last attempt canceled", rep)
			}
		})
	}
}

// TestSentinelsMatch: Spec.Timeout's stop matches ErrTimeout (exit 124), a missing program ErrNotFound (127).
func TestSentinelsMatch(t *testing.T) {
	dev := launcher.Devices{Device: "cpu"}
	rep, err := launcher.Run(context.Background(), launcher.Spec{
		Program: []string{"sleep", "60"},
		Devices: dev,
		Timeout: 300 * time.Millisecond,
		Grace:   time.Second,
	})
	if !errors.Is(err, launcher.ErrTimeout) || launcher.ExitCode(err) != 124 || rep.Verdict.Reason != launcher.StopTimeout {
		t.Errorf("timeout: err %v, code %d, report %+v; want ErrTimeout, 124", err, launcher.ExitCode(err), rep)
	}
	_, err = launcher.Run(context.Background(), launcher.Spec{
		Program: []string{"/nonexistent/program"},
		Devices: dev,
	})
	if !errors.Is(err, launcher.ErrNotFound) || launcher.ExitCode(err) != 127 || errors.Is(err, launcher.ErrTimeout) {
		t.Errorf("missing program: err %v, code %d; want ErrNotFound alone, 127", err, launcher.ExitCode(err))
	}
}

// TestPublicTestsImportNothingInternal: the examples and the tests of the public API use it as a program outside
// the module would: no internal package, no command.
func TestPublicTestsImportNothingInternal(t *testing.T) {
	for _, name := range []string{"example_test.go", "api_test.go", "readme_test.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(p, "tpurun/internal/") || strings.HasPrefix(p, "tpurun/cmd/") {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
}
