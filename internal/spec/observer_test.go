package spec

import (
	"fmt"
	"strings"
	"testing"
)

// TestEventKindsHaveNames: an Observer printing Event.Kind (fmt's %v) shows the kind's name, every kind has one,
// and a kind this build does not know says so.
func TestEventKindsHaveNames(t *testing.T) {
	for k := AttemptStarted; k <= AttemptEnded; k++ {
		if s := fmt.Sprint(k); s == "" || strings.HasPrefix(s, "EventKind(") {
			t.Errorf("kind %d has no name: %q", int(k), s)
		}
	}
	if got := fmt.Sprintf("%v %v", AttemptEnded, EventKind(99)); got != "AttemptEnded EventKind(99)" {
		t.Errorf("got %q", got)
	}
}
