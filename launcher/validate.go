package launcher

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/hostname"
	"tpurun/internal/topology"
	"tpurun/worker"
)

// Validate checks the settings that need no detection; every error is a *failure.ConfigError or a
// *failure.ProgramError, the first one in the order of the checks below.
func (s *Spec) Validate() error {
	return cmp.Or(s.checkProgram(), s.checkBounds(), s.checkMaster(), s.checkNames(), s.checkFrames(), s.checkPlan(),
		s.checkPreload(), s.Rendezvous.validate())
}

// checkProgram refuses a job without a program, or whose program cannot be found (function mode runs Python,
// found when it is set up).
func (s *Spec) checkProgram() error {
	switch {
	case s.Fn != nil:
		return nil
	case len(s.Program) == 0 || s.Program[0] == "":
		return &failure.ConfigError{Field: failure.SettingProgram, Value: "", Hint: "no program given; usage: tpurun [flags] [--] PROGRAM [ARGS...]"}
	}
	if _, err := exec.LookPath(s.Program[0]); err != nil {
		return &failure.ProgramError{Program: s.Program[0], Err: err}
	}
	return nil
}

// checkBounds refuses a negative grace period, timeout or number of restarts.
func (s *Spec) checkBounds() error {
	for _, d := range []struct {
		name failure.Setting
		v    time.Duration
	}{{failure.SettingGrace, s.Grace}, {failure.SettingTimeout, s.Timeout}} {
		if d.v < 0 {
			return &failure.ConfigError{Field: d.name, Value: d.v.String(), Hint: "must not be negative"}
		}
	}
	if s.MaxRestarts < 0 {
		return &failure.ConfigError{Field: failure.SettingMaxRestarts, Value: strconv.Itoa(s.MaxRestarts), Hint: "must be 0 or more"}
	}
	return nil
}

// checkMaster refuses a master address that is no host and a master port that is no port.
func (s *Spec) checkMaster() error {
	if s.MasterAddr != "" && hostname.Check(s.MasterAddr) != nil {
		return &failure.ConfigError{Field: failure.SettingMasterAddr, Value: s.MasterAddr, Hint: "is neither an IP address nor a host name; give node 0's address, e.g. 10.0.0.2 or host-0.example"}
	}
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		return &failure.ConfigError{Field: failure.SettingMasterPort, Value: strconv.Itoa(s.MasterPort), Hint: "must be 1..65535, or 0 to pick a free port"}
	}
	return nil
}

// checkNames refuses a run id or role that cannot be a directory name (see validateName).
func (s *Spec) checkNames() error {
	for _, n := range []struct {
		what failure.Setting
		v    string
	}{{failure.SettingRunID, s.RunID}, {failure.SettingRole, s.Role}} {
		if n.v == "" {
			continue
		}
		if err := validateName(n.what, n.v); err != nil {
			return err
		}
	}
	return nil
}

// checkFrames refuses a largest result frame beyond the contract's.
func (s *Spec) checkFrames() error {
	if s.Results.MaxFrameBytes < 0 || s.Results.MaxFrameBytes > worker.MaxPayload {
		return &failure.ConfigError{Field: failure.SettingMaxResultBytes, Value: strconv.FormatInt(s.Results.MaxFrameBytes, 10),
			Hint: fmt.Sprintf("must be 1..%d bytes", int64(worker.MaxPayload))}
	}
	return nil
}

// checkPlan refuses a ready plan that has no workers on the node this launcher runs.
func (s *Spec) checkPlan() error {
	if s.Plan != nil && len(s.Plan.Local(s.NodeRank)) == 0 {
		return &failure.ConfigError{Field: failure.SettingNodeRank, Value: strconv.Itoa(s.NodeRank),
			Hint: fmt.Sprintf("the plan has no workers on node %d; it has %d node(s)", s.NodeRank, len(s.Plan.Nodes))}
	}
	return nil
}

// validateName checks a run id or role: it becomes a directory name and an env value, so it holds no path
// separator, no "..", no control character, and at most 128 bytes.
func validateName(what failure.Setting, v string) error {
	bad := ""
	switch {
	case len(v) > 128:
		bad = fmt.Sprintf("is %d bytes long; the limit is 128", len(v))
	case v == "." || v == ".." || strings.Contains(v, ".."):
		bad = "contains '..'"
	case strings.ContainsAny(v, "/\\="):
		bad = "contains '/', '\\' or '='"
	}
	for _, r := range v {
		if bad == "" && (r < 0x20 || r == 0x7f) {
			bad = "contains a control character"
		}
	}
	if bad == "" {
		return nil
	}
	return &failure.ConfigError{Field: what, Value: v, Hint: bad + "; use letters, digits, '.', '-' and '_'"}
}

// checkOutputs refuses, before anything starts, a results file or log directory that cannot be written.
func (s *Spec) checkOutputs() error {
	if f := s.Results.File; f != "" {
		dir := f[:strings.LastIndexByte("/"+f, '/')]
		if dir == "" {
			dir = "."
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return &failure.ConfigError{Field: failure.SettingResultsFile, Value: f, Hint: fmt.Sprintf("its directory %q does not exist or is not a directory; create it first", dir)}
		}
		if st, err := os.Stat(f); err == nil && !st.Mode().IsRegular() {
			return &failure.ConfigError{Field: failure.SettingResultsFile, Value: f, Hint: "exists and is not a regular file"}
		}
	}
	if d := s.LogDir; d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: d, Hint: "exists and is not a directory"}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: d, Hint: err.Error()}
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
	return &failure.ConfigError{Field: failure.SettingMasterPort, Value: strconv.Itoa(port),
		Hint: fmt.Sprintf("already in use on %s by %s; stop it, pick another master port, or pass 0 for a free port", addr, holder)}
}

// checkMasterAddr refuses, on a world of one node, a MASTER_ADDR that does not name this host: rank 0's store
// listens here, so the other ranks would look for it elsewhere and hang until torch's timeout. A name that does
// not resolve, or resolves only to addresses of other hosts, is a *failure.ConfigError naming this host's addresses.
func (s *Spec) checkMasterAddr() error {
	addr := s.MasterAddr
	if !s.Rendezvous.Solo() || s.Plan != nil {
		return nil
	}
	ips, err := net.LookupHost(addr)
	if err != nil {
		return &failure.ConfigError{Field: failure.SettingMasterAddr, Value: addr,
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
	return &failure.ConfigError{Field: failure.SettingMasterAddr, Value: addr, Hint: fmt.Sprintf("is not an address of this host (%s), and a run on one node "+
		"hosts rank 0's store here: leave it unset (127.0.0.1) or give one of this host's addresses; for several nodes give each "+
		"--nnodes N and --node-rank R with node 0's address", strings.Join(mine, ", "))}
}
