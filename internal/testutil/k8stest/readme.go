package k8stest

import (
	"fmt"
	"strings"
)

// READMEPodCommand is the command the README's JobSet section documents for every pod, as argv: in the fenced code
// block that applies a JobSet of examples/kubernetes/ (a line holding "kubectl apply -f examples/kubernetes/"),
// the one line that starts with "tpurun ", split on spaces (the line has no quoting). The manifests' tests hold
// each pod's Argv to it, so that the README and the manifests cannot drift apart.
func READMEPodCommand(readme []byte) ([]string, error) {
	var found [][]string
	var block []string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "```") {
			if in && hasLine(block, "kubectl apply -f examples/kubernetes/") {
				for _, l := range block {
					if strings.HasPrefix(l, "tpurun ") {
						found = append(found, strings.Fields(l))
					}
				}
			}
			in, block = !in, nil
			continue
		}
		if in {
			block = append(block, strings.TrimSpace(line))
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("README: %d tpurun lines in fenced blocks that apply examples/kubernetes/ (%q), want 1", len(found), found)
	}
	return found[0], nil
}

func hasLine(lines []string, substr string) bool {
	for _, l := range lines {
		if strings.Contains(l, substr) {
			return true
		}
	}
	return false
}
