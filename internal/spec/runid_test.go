package spec

import "testing"

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
