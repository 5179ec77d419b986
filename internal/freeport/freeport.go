// Package freeport picks TCP ports for other processes to bind: below the kernel's ephemeral range.
package freeport

import (
	"cmp"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"strconv"
)

// Pick picks a TCP port that is free on host ("" for every interface), for another process to bind soon (a worker's
// TCPStore on MASTER_PORT, the JAX coordinator, a test's endpoint). It picks outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), from which every outgoing connection on the host takes its
// local port: a port from there can be taken between the pick and the bind (seen: MASTER_PORT taken 350 ms after it
// was picked, "Address already in use" in rank 0's TCPStore, with tests running beside it). Ports below the range go
// only to explicit binds: Pick tries random ones in [10000, 30000) below its start (above its end when there are
// none), but torch's defaults (29400-29599), binding each to see that it is free; the kernel's choice (port 0) when
// none is found in 64 tries. 30000-32767 is Kubernetes' NodePort range, which a pod on the host's network (TPU pods
// often are) must leave to kube-proxy's rules.
func Pick(host string) (int, error) {
	lo, hi := ephemeralPorts()
	return freePort(host, lo, hi)
}

// freePort is Pick with the ephemeral range given: [lo, hi].
func freePort(host string, lo, hi int) (int, error) {
	var ranges [][2]int // [from, to) of ports below, then above the ephemeral range
	if lo > 10000 {
		ranges = append(ranges, [2]int{10000, min(lo, 30000)})
	}
	if hi < 65535 {
		ranges = append(ranges, [2]int{max(hi+1, 32768), 65536})
	}
	for _, r := range ranges {
		for range 64 {
			port := r[0] + mathrand.IntN(r[1]-r[0])
			if port >= 29400 && port < 29600 {
				continue // torch's defaults: 29400 (the rendezvous endpoint) and 29500 (MASTER_PORT)
			}
			if ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
				ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a free port on %s: %w", cmp.Or(host, "every interface"), err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralPorts is the kernel's range of local ports for outgoing connections (of this network namespace), Linux's
// default when it cannot be read.
func ephemeralPorts() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if _, serr := fmt.Sscan(string(b), &lo, &hi); err != nil || serr != nil || lo > hi {
		return 32768, 60999
	}
	return lo, hi
}
