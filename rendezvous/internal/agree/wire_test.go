package agree

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// TestErrorSaysRendezvousOnce: an *Error says "rendezvous" once at its start, whatever its kind.
func TestErrorSaysRendezvousOnce(t *testing.T) {
	for _, kind := range kinds {
		msg := NewError(kind, "detail").Error()
		if !strings.HasPrefix(msg, "rendezvous") && !strings.HasPrefix(msg, "bad rendezvous") {
			t.Errorf("%q does not say it is about the rendezvous", msg)
		}
		if strings.HasPrefix(msg, "rendezvous: rendezvous") || strings.HasPrefix(msg, "rendezvous: bad rendezvous") {
			t.Errorf("%q says rendezvous twice", msg)
		}
	}
}

// TestErrorsMatchTheirCategory: a configuration error (ErrConfig, ErrNoToken, an *Error of either kind) matches
// failure.ErrConfig and exits 2, bare or under the job's ErrRendezvous; a runtime error exits 69 once the job marks it
// with failure.ErrRendezvous, and is no category of its own (70 bare).
func TestErrorsMatchTheirCategory(t *testing.T) {
	for _, err := range []error{rendezvous.ErrConfig, rendezvous.ErrNoToken, ConfigError(failure.RendezvousNodes, "0", "at least 1"),
		&rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: string(failure.RendezvousListen)}} {
		for _, e := range []error{err, fmt.Errorf("%w: join: %w", failure.ErrRendezvous, err)} {
			if !errors.Is(e, failure.ErrConfig) || failure.ExitCode(e) != failure.ExitUsage {
				t.Errorf("%v: errors.Is(ErrConfig) %v, ExitCode %d", e, errors.Is(e, failure.ErrConfig), failure.ExitCode(e))
			}
		}
	}
	for err, want := range map[error]int{
		rendezvous.ErrNodeLost: failure.ExitInternal,
		fmt.Errorf("%w: %w", failure.ErrRendezvous, rendezvous.ErrNodeLost):                       failure.ExitRendezvous,
		fmt.Errorf("%w: %w", failure.ErrRendezvous, NewError(rendezvous.ErrTimeout, "join")):      failure.ExitRendezvous,
		fmt.Errorf("%w: %w", failure.ErrRendezvous, NewError(rendezvous.ErrMissingNodes, "join")): failure.ExitRendezvous,
	} {
		if got := failure.ExitCode(err); got != want || errors.Is(err, failure.ErrConfig) {
			t.Errorf("ExitCode(%v) = %d, want %d (errors.Is(ErrConfig) %v)", err, got, want, errors.Is(err, failure.ErrConfig))
		}
	}
}
