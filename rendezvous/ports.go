package rendezvous

import (
	"fmt"
	"net"
)

// DefaultMegascalePort is MEGASCALE_PORT by convention.
const DefaultMegascalePort = 8081

// FreePort asks the kernel for a free TCP port on every interface. The port is free when FreePort returns; the
// caller should bind it soon.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, fmt.Errorf("rendezvous: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// PickPorts picks the ports node 0 shares if it becomes node 0: a free MASTER_PORT and coordinator port, and the
// conventional MegaScale port.
func PickPorts() (map[string]int, error) {
	out := map[string]int{PortMegascale: DefaultMegascalePort}
	for _, k := range []string{PortMaster, PortCoordinator} {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	if out[PortMaster] == out[PortCoordinator] {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		out[PortCoordinator] = p
	}
	return out, nil
}
