package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"tpurun/launcher"
	"tpurun/launcher/topology"
)

// checkMasterPort refuses a --master-port that another process already listens on, before any worker starts:
// torchrun binds it for its store and fails at once, and without this check rank 0's TCPStore would fail later
// with a bare EADDRINUSE. The check binds and releases addr:port; an address that is not this host's
// (EADDRNOTAVAIL) is left to the workers. The error is a *launcher.ConfigError (exit 2) naming the port, the
// address and the holder's pid when /proc shows it.
func checkMasterPort(addr string, port int) error {
	if port == 0 {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err == nil {
		return l.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	holder := "a process tpurun could not identify"
	if pid, cmd, herr := topology.PortHolder("/proc", port); herr == nil {
		holder = fmt.Sprintf("pid %d (%s)", pid, cmd)
	}
	return &launcher.ConfigError{Field: "MASTER_PORT", Value: strconv.Itoa(port),
		Hint: fmt.Sprintf("already in use on %s by %s; stop it, pick another --master-port, or pass 0 for a free port", addr, holder)}
}
