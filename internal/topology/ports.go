package topology

import (
	"bufio"
	"cmp"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PortHolder finds the process listening on TCP port: the socket inode from <procRoot>/net/tcp and tcp6, then the
// pid whose fd links to socket:[inode]. It returns the pid and command, or an error saying why it could not.
func PortHolder(procRoot string, port int) (int, string, error) {
	var inodes []string
	for _, name := range []string{"tcp", "tcp6"} {
		inodes = append(inodes, listeningInodes(filepath.Join(procRoot, "net", name), port)...)
	}
	if len(inodes) == 0 {
		return 0, "", fmt.Errorf("no listening socket on port %d in %s/net/tcp{,6}", port, procRoot)
	}
	want := map[string]bool{}
	for _, ino := range inodes {
		want["socket:["+ino+"]"] = true
	}
	pid := 0
	if err := eachFD(procRoot, func(p int, target string) bool {
		if want[target] {
			pid = p
			return false
		}
		return true
	}); err != nil {
		return 0, "", err
	}
	if pid == 0 {
		return 0, "", fmt.Errorf("socket inode(s) %s on port %d belong to no process visible in %s", strings.Join(inodes, ","), port, procRoot)
	}
	return pid, command(procRoot, pid), nil
}

// listeningInodes parses a /proc/net/tcp table: "sl local_address rem_address st ... inode", 0A = LISTEN. A table
// it cannot read names none.
func listeningInodes(path string, port int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if fields[9] != "0" {
			out = append(out, fields[9])
		}
	}
	return out
}

// PortFree reports whether a TCP port can be bound on every address of this host right now.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// CheckPorts is the pre-start check of the TPU_PROCESS_PORTs of node nodeRank's workers (nil free means
// PortFree). On one node a busy port is moved to a free one, in every worker's TPU_PROCESS_ADDRESSES too; on
// several, a busy port is a *PortBusyError naming its holder in procRoot. A port is busy only when it stays so
// over a few tries (another launcher probing its own ports holds one for microseconds).
func (p *Plan) CheckPorts(nodeRank int, procRoot string, free func(int) bool) error {
	if free == nil {
		free = PortFree
	}
	var mine []*Worker // the node's workers, and their ports as planned and as moved to
	used, moved := map[int]bool{}, map[int]int{}
	for i := range p.Workers {
		if w := &p.Workers[i]; w.NodeRank == nodeRank {
			mine = append(mine, w)
			port, _ := w.tpuPort()
			used[port] = true
		}
	}
	next := 0 // the next port to try, above the node's own
	for _, w := range mine {
		port, ok := w.tpuPort()
		if !ok || !stillBusy(free, port) {
			continue
		}
		if len(p.Nodes) > 1 {
			pe := &PortBusyError{Port: port, LocalRank: w.LocalRank}
			if pid, cmd, err := PortHolder(procRoot, port); err == nil {
				pe.PID, pe.Command = pid, cmd
			}
			return pe
		}
		if next = nextFree(cmp.Or(next, port+len(mine)), used, free); next >= 65536 {
			return &PortBusyError{Port: port, LocalRank: w.LocalRank}
		}
		used[next], moved[port] = true, next
		w.Env["TPU_PROCESS_PORT"] = strconv.Itoa(next)
		next++
	}
	for _, w := range p.Workers { // on one node, every address is this host's
		if addrs, ok := w.Env["TPU_PROCESS_ADDRESSES"]; ok {
			w.Env["TPU_PROCESS_ADDRESSES"] = movePorts(addrs, moved)
		}
	}
	return nil
}

// nextFree is the first port from next that the node does not use and is free; 65536 when none is.
func nextFree(next int, used map[int]bool, free func(int) bool) int {
	for next < 65536 && (used[next] || !free(next)) {
		next++
	}
	return next
}

// stillBusy reports whether port stays busy over a few tries.
func stillBusy(free func(int) bool, port int) bool {
	for try := range 4 {
		if free(port) {
			return false
		}
		time.Sleep(time.Duration(5<<try) * time.Millisecond)
	}
	return true
}

// tpuPort is the worker's TPU_PROCESS_PORT, when it has one.
func (w *Worker) tpuPort() (int, bool) {
	v, ok := w.Env["TPU_PROCESS_PORT"]
	if !ok {
		return 0, false
	}
	port, err := strconv.Atoi(v)
	return port, err == nil
}

// movePorts rewrites the host:port entries of a comma-separated list whose port moved.
func movePorts(addrs string, moved map[int]int) string {
	parts := strings.Split(addrs, ",")
	for j, a := range parts {
		host, ps, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if old, err := strconv.Atoi(ps); err == nil {
			if to, ok := moved[old]; ok {
				parts[j] = net.JoinHostPort(host, strconv.Itoa(to))
			}
		}
	}
	return strings.Join(parts, ",")
}
