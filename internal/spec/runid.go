package spec

import "cmp"

// NoRunID is torchrun's run id of a multi-host job given none ("none"): every node of a world must have the same.
const NoRunID = "none"

// The JobSet's identity and restart attempt, as a manifest maps them from the pod's jobset.sigs.k8s.io labels
// through the downward API (examples/kubernetes): the default run id of a pod's job (JobSetRunID).
const (
	EnvJobSetUID            = "JOBSET_UID"
	EnvJobSetName           = "JOBSET_NAME"
	EnvJobSetRestartAttempt = "JOBSET_RESTART_ATTEMPT"
)

// JobSetRunID is the run id of a JobSet's pods when env maps the JobSet's identity (JOBSET_UID, else JOBSET_NAME)
// and restart attempt (JOBSET_RESTART_ATTEMPT): "<identity>-<attempt>", the same on every pod of one attempt and
// another after a restart, so that a restarted JobSet never meets its previous attempt's rendezvous record. ""
// when env names no JobSet.
func JobSetRunID(env []string) string {
	id := cmp.Or(LookupEnv(env, EnvJobSetUID), LookupEnv(env, EnvJobSetName))
	if id == "" {
		return ""
	}
	if a := LookupEnv(env, EnvJobSetRestartAttempt); a != "" {
		return id + "-" + a
	}
	return id
}
