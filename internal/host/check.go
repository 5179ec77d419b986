package host

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
)

// CheckOutputs refuses, before anything starts, a results file or log directory that cannot be written.
func CheckOutputs(s *spec.Spec) error {
	if f := s.Results.File; f != "" {
		dir := filepath.Dir(f)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return &failure.ConfigError{Field: failure.ResultsFile, Value: f, Hint: fmt.Sprintf("its directory %q does not exist or is not a directory; create it first", dir)}
		}
		if st, err := os.Stat(f); err == nil && !st.Mode().IsRegular() {
			return &failure.ConfigError{Field: failure.ResultsFile, Value: f, Hint: "exists and is not a regular file"}
		}
	}
	if d := s.LogDir; d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			return &failure.ConfigError{Field: failure.LogDir, Value: d, Hint: "exists and is not a directory"}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return &failure.ConfigError{Field: failure.LogDir, Value: d, Hint: err.Error()}
		}
	}
	return nil
}

// checkMasterPort refuses a MASTER_PORT that another process already listens on, before any worker starts:
// torchrun binds it for its store and fails at once, and without this check rank 0's TCPStore would fail later
// with a bare EADDRINUSE. The check binds and releases addr:port; an address that is not this host's
// (EADDRNOTAVAIL) is left to the workers. The error is a *failure.ConfigError naming the port, the address and the
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
	return &failure.ConfigError{Field: failure.MasterPort, Value: strconv.Itoa(port),
		Hint: fmt.Sprintf("already in use on %s by %s; stop it, pick another master port, or pass 0 for a free port", addr, holder)}
}

// CheckMasterAddr refuses, on a world of one node, a MASTER_ADDR that does not name this host: rank 0's store
// listens here, so the other ranks would look for it elsewhere and hang until torch's timeout. A name that does
// not resolve, or resolves only to addresses of other hosts, is a *failure.ConfigError naming this host's addresses.
func CheckMasterAddr(s *spec.Spec) error {
	addr := s.MasterAddr
	if !s.Rendezvous.Solo() || s.Plan != nil {
		return nil
	}
	ips, err := net.LookupHost(addr)
	if err != nil {
		return &failure.ConfigError{Field: failure.MasterAddr, Value: addr,
			Hint: fmt.Sprintf("does not resolve (%v); give an IP address or a name of this host, or leave it unset (127.0.0.1)", err)}
	}
	for _, ip := range ips {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err == nil {
			return l.Close()
		}
		if !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil // not a verdict about the address (a full fd table, say): the workers will tell
		}
	}
	var mine []string
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				mine = append(mine, n.IP.String())
			}
		}
	}
	return &failure.ConfigError{Field: failure.MasterAddr, Value: addr, Hint: fmt.Sprintf("is not an address of this host (%s), and a run on one node "+
		"hosts rank 0's store here: leave it unset (127.0.0.1) or give one of this host's addresses; for several nodes give each "+
		"--nnodes N and --node-rank R with node 0's address", strings.Join(mine, ", "))}
}
