package spec

import (
	"cmp"
	"strings"
)

// EnvLookup looks keys up in env as exec does: the last entry of a key wins.
func EnvLookup(env []string) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k != "" && k == key {
				return v, true
			}
		}
		return "", false
	}
}

// LookupEnv is the value of key in env (last one wins, as for exec).
func LookupEnv(env []string, key string) string {
	v, _ := EnvLookup(env)(key)
	return v
}

// WithoutEnv is env without the entries of key.
func WithoutEnv(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}

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
