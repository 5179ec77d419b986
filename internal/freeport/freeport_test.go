package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickOutsideTheEphemeralRange: the ports Pick picks are free, outside the kernel's range for outgoing
// connections (which can take such a port before the worker binds it) and torch's defaults; above the range when
// nothing is left below it, and the kernel's choice when the range is everything.
func TestPickOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralPorts()
	bindable := func(port int) bool {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	for range 20 {
		p, err := Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo && p <= hi || p < 10000 || p >= 29400 && p < 29600 || p >= 30000 && p < 32768 || !bindable(p) {
			t.Fatalf("Pick = %d: want a free port in [10000, %d) or above %d, not 29400-29599 (torch's) nor 30000-32767 (NodePorts)", p, lo, hi)
		}
	}
	for _, c := range []struct {
		lo, hi     int
		above      int // the pick must be above this
		kernelOnly bool
	}{
		{lo: 5000, hi: 60999, above: 60999}, // nothing from 10000 below the range: above it
		{lo: 1024, hi: 65535, kernelOnly: true},
	} {
		p, err := freePort("127.0.0.1", c.lo, c.hi)
		if err != nil {
			t.Fatal(err)
		}
		if p <= 0 || p > 65535 || !c.kernelOnly && p <= c.above {
			t.Fatalf("range %d-%d: picked %d, want above %d", c.lo, c.hi, p, c.above)
		}
	}
}
