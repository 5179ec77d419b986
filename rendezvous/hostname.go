package rendezvous

import (
	"fmt"
	"strings"
)

// hostProblem says what is wrong with a host name from a host list or a member, "" when nothing.
func hostProblem(h string) string {
	if h == "" {
		return "empty host name"
	}
	if len(h) > 253 {
		return fmt.Sprintf("host name of %d characters", len(h))
	}
	for _, r := range h {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(",[]/\\\"'", r) {
			return fmt.Sprintf("host name %q holds the character %q", h, r)
		}
	}
	return ""
}
