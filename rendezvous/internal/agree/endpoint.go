package agree

import (
	"fmt"
	"net"
	"strconv"

	"tpurun/internal/failure"
	"tpurun/internal/hostname"
	"tpurun/rendezvous"
)

// SplitEndpoint checks one host:port endpoint and returns its parts: the host is an IP address or a host name,
// the port a number 0..65535 (0 only where zeroOK). A bad one is an error matching rendezvous.ErrConfig naming
// field (the endpoint, or the listen address).
func SplitEndpoint(field failure.Setting, ep string, zeroOK bool) (string, int, error) {
	host, p, err := net.SplitHostPort(ep)
	if err != nil {
		return "", 0, ConfigError(field, ep, "not host:port (for IPv6, [addr]:port)")
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, ConfigError(field, ep, fmt.Sprintf("port %q is not a number; use 1..65535", p))
	}
	if port < 0 || port > 65535 {
		return "", 0, ConfigError(field, ep, fmt.Sprintf("port %d is out of range; use 1..65535", port))
	}
	if port == 0 && !zeroOK {
		return "", 0, ConfigError(field, ep, "port 0 means any free port, which only the node hosting the server may ask for; give the port the server listens on (default "+strconv.Itoa(rendezvous.DefaultPort)+")")
	}
	if host == "" {
		return host, port, nil // every interface (listen) or this host (dial)
	}
	if err := hostname.Check(host); err != nil {
		return "", 0, ConfigError(field, ep, err.Error())
	}
	return host, port, nil
}
