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

// TestJobSetRunID: a JobSet's pods share a run id made of its uid (else name) and restart attempt, so a restarted
// JobSet never meets its previous attempt's rendezvous record; without a JobSet there is none.
func TestJobSetRunID(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"JOBSET_UID=3f2a", "JOBSET_NAME=train", "JOBSET_RESTART_ATTEMPT=2"}, "3f2a-2"},
		{[]string{"JOBSET_NAME=train", "JOBSET_RESTART_ATTEMPT=0"}, "train-0"},
		{[]string{"JOBSET_NAME=train"}, "train"},
		{[]string{"JOBSET_RESTART_ATTEMPT=1"}, ""},
		{nil, ""},
	} {
		if got := JobSetRunID(tc.env); got != tc.want {
			t.Errorf("JobSetRunID(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}
