package launcher

import "strings"

// sweepTagEnv marks the workers of one launcher when Config.SweepTag is set.
const sweepTagEnv = "TPURUN_SWEEP_TAG"

// withSweepTag replaces any inherited TPURUN_SWEEP_TAG in env with tag.
func withSweepTag(env []string, tag string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, sweepTagEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, sweepTagEnv+"="+tag)
}
