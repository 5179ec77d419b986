package spec

import (
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
