package rendezvous

import (
	"cmp"
	"fmt"
	"net"
)

// FreePort asks the kernel for a TCP port that is free on host ("" for every interface). The port is free when
// FreePort returns; the caller should bind it soon.
func FreePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a free port on %s: %w", cmp.Or(host, "every interface"), err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// PickPorts picks the ports node 0 shares if it becomes node 0: a free MASTER_PORT and coordinator port. (The
// MegaScale port is the launcher's to add: a TPU convention, not a free port.)
func PickPorts() (map[string]int, error) {
	out := map[string]int{}
	for _, k := range []string{PortMaster, PortCoordinator} {
		p, err := FreePort("")
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	if out[PortMaster] == out[PortCoordinator] {
		p, err := FreePort("")
		if err != nil {
			return nil, err
		}
		out[PortCoordinator] = p
	}
	return out, nil
}
