package launcher

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"tpurun/launcher/topology"
)

// checkMasterPort refuses a MASTER_PORT that another process already listens on, before any worker starts:
// torchrun binds it for its store and fails at once, and without this check rank 0's TCPStore would fail later
// with a bare EADDRINUSE. The check binds and releases addr:port; an address that is not this host's
// (EADDRNOTAVAIL) is left to the workers. The error is a *ConfigError naming the port, the address and the
// holder's pid when procRoot shows it.
func checkMasterPort(addr string, port int, procRoot string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err == nil {
		return l.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	holder := "a process tpurun could not identify"
	if pid, cmd, herr := topology.PortHolder(procRoot, port); herr == nil {
		holder = fmt.Sprintf("pid %d (%s)", pid, cmd)
	}
	return &ConfigError{Field: "MASTER_PORT", Value: strconv.Itoa(port),
		Hint: fmt.Sprintf("already in use on %s by %s; stop it, pick another master port, or pass 0 for a free port", addr, holder)}
}
