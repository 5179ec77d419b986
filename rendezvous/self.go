package rendezvous

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Self is m as a launcher sends it for this node: tpurun's own Member (its launcher calls it), and the
// benchmark's, so that the two cannot drift. A static world named by a host list takes each node's name and address
// from it (NamesNodes), so m goes as given; otherwise (tcp, etcd, a static world named by its endpoint, torchrun's
// --master-addr line) a node names itself: without a name, hostname (with "#<rank>" when it requests a node rank:
// several agents on one host told apart by their ranks, torchrun's usage; with "_<pid>" on a CPU or GPU host of a
// world of several nodes, as torchrun's node id has the pid), and without an address, its address toward the
// endpoint (localAddr).
func (r *Rendezvous) Self(m Member, hostname func() (string, error), pid int) (Member, error) {
	if r.NamesNodes() {
		return m, nil
	}
	if m.Host == "" {
		h, err := hostname()
		if err != nil {
			return m, fmt.Errorf("hostname: %w; give the node a name", err)
		}
		switch {
		case m.Rank >= 0:
			h += "#" + strconv.Itoa(m.Rank)
		case m.UnevenWorkers && !r.backend.Solo():
			h += "_" + strconv.Itoa(pid)
		}
		m.Host = h
	}
	if m.Addr == "" {
		m.Addr = localAddr(r.Endpoint())
	}
	return m, nil
}

// localAddr is the address of this host that reaches endpoint (the first of a comma-separated list, with or
// without a URL scheme): loopback for a loopback (or empty) endpoint.
func localAddr(endpoint string) string {
	first := strings.Split(endpoint, ",")[0]
	if _, rest, ok := strings.Cut(first, "://"); ok {
		first = rest
	}
	h, _, err := net.SplitHostPort(first)
	if err != nil || h == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); (ip != nil && ip.IsLoopback()) || h == "localhost" {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", first) // no packet is sent: this only asks the kernel for the route
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
