package hostname

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	good := []string{"localhost", "node0", "host-0.example", "host-0.example.", "tpu-job-0-0.tpu-job", "my_host",
		"10.0.0.2", "127.0.0.1", "::1", "fd00::1", "fe80::1%eth0", "::ffff:10.0.0.1", "a", "0a", "x1.2",
		strings.Repeat("a", 63) + ".b", strings.Repeat("a.", 126) + "a"}
	for _, h := range good {
		if err := Check(h); err != nil {
			t.Errorf("Check(%q) = %v, want nil", h, err)
		}
	}
	bad := []string{"", ".", "a..b", ".a", "1.2.3.4.5", "123", "010.0.0.1", "[::1]", "host:80", "a b", "a/b", "a\x00b",
		"a%b", "ü.example", strings.Repeat("a", 64), strings.Repeat("a.", 127) + "a", "host name"}
	for _, h := range bad {
		if err := Check(h); err == nil {
			t.Errorf("Check(%q) = nil, want an error", h)
		}
	}
}

// FuzzCheck: an accepted host is an address, or a name without the separators of host lists and endpoints.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"localhost", "10.0.0.1", "::1", "fe80::1%eth0", "a..b", "1.2.3.4.5", "[::1]", "a,b", "a:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if Check(h) != nil {
			return
		}
		if _, err := netip.ParseAddr(h); err == nil {
			return
		}
		if h == "" || len(h) > MaxLen || strings.ContainsAny(h, ",: \t\n[]/%") {
			t.Fatalf("Check accepted %q", h)
		}
	})
}
