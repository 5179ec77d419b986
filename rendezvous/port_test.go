package rendezvous_test

import (
	"testing"

	"tpurun/rendezvous"
)

// TestWithDefaultPort: an endpoint without a port gets torchrun's default (29400; 2379 for etcd).
func TestWithDefaultPort(t *testing.T) {
	for _, c := range []struct{ backend, in, want string }{
		{"c10d", "127.0.0.1", "127.0.0.1:29400"},
		{"tcp", "node0.example", "node0.example:29400"},
		{"tcp", "::1", "[::1]:29400"},
		{"tcp", "[::1]", "[::1]:29400"},
		{"tcp", "127.0.0.1:0", "127.0.0.1:0"},
		{"etcd", "a,b:2380", "a:2379,b:2380"},
		{"tcp", "", ""},
	} {
		if got := rendezvous.WithDefaultPort(c.backend, c.in); got != c.want {
			t.Errorf("%s %q: %q, want %q", c.backend, c.in, got, c.want)
		}
	}
}
