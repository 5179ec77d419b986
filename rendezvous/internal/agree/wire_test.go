package agree

import (
	"strings"
	"testing"
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
