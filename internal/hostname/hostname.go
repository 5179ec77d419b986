// Package hostname owns what tpurun accepts as a host: an IP address or a DNS host name. The launcher
// (MASTER_ADDR), topology (TPU_WORKER_HOSTNAMES, SLURM node lists, the metadata server's worker endpoints, the
// rendezvous hosts option) and the rendezvous (its endpoint) all check hosts with Check. It sits below all of them
// because topology and rendezvous may not import each other.
package hostname

import (
	"fmt"
	"net/netip"
	"strings"
)

// MaxLen is the longest host name DNS allows.
const MaxLen = 253

// Check reports whether h is an IP address (IPv6 without brackets, with an optional zone) or a DNS host name:
// dot-separated labels of 1 to 63 letters, digits, '-' and '_', at most MaxLen bytes with an optional trailing dot,
// and not all numeric (1.2.3.4.5 is a mistyped address, not a name).
func Check(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if len(h) > MaxLen {
		return fmt.Errorf("host name of %d bytes; at most %d", len(h), MaxLen)
	}
	numeric := true
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q is neither an IP address nor a host name (empty or over-long label)", h)
		}
		for _, r := range label {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-', r == '_':
				numeric = false
			default:
				return fmt.Errorf("host %q is neither an IP address nor a host name (it holds %q)", h, r)
			}
		}
	}
	if numeric {
		return fmt.Errorf("host %q is neither an IP address nor a host name", h)
	}
	return nil
}
