package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// TestWaitingNodeSaysWhoIsMissing: a static node 0 whose peer never comes says, every progress interval (the
// default, 5 s), who has arrived, who is missing and how long it will still wait: one line per interval, not a
// flood. A tcp node says so the same way (progress_interval=1), before it reaches node 0's server and after, and so do two of
// three nodes on etcd: the one counting the registrations names them and the missing node, the other counts them.
func TestWaitingNodeSaysWhoIsMissing(t *testing.T) {
	t.Parallel()
	t.Run("static node 0, peer never comes", testProgressStatic)
	t.Run("tcp node, before and after node 0 serves", testProgressTCPClient)
	t.Run("etcd, 2 of 3 nodes", testProgressEtcd)
}

// testProgressStatic: node 0 of a static world of 2, alone, at the default interval.
func testProgressStatic(t *testing.T) {
	t.Parallel()
	ep := testutil.FreeEndpoint(t)
	start := time.Now()
	n := startNode(t, append(os.Environ(), testutil.Fake("exit:0")), "--device", "cpu", "--nnodes", "2", "--node-rank", "0",
		"--rdzv-backend", "static", "--rdzv-endpoint", ep, "--rdzv-timeout", neverTimeout, "--node-name", "alone", "--", self(t))
	line := lineWith(n.stderr.WaitFor(t, "missing: node rank 1;"), "missing: node rank 1;")
	for _, want := range []string{"1 of 2 arrived", `host "alone"`, "the join times out in "} {
		if !strings.Contains(line, want) {
			t.Fatalf("the progress line does not say %q:\n%s", want, line)
		}
	}
	t.Log(line)
	testutil.WaitFor(t, "a second progress line", func() error {
		if c := strings.Count(n.stderr.String(), "waits for nodes:"); c < 2 {
			return fmt.Errorf("%d so far", c)
		}
		return nil
	})
	lines := strings.Count(n.stderr.String(), "waits for nodes:")
	if most := int(time.Since(start)/(5*time.Second)) + 1; lines > most {
		t.Fatalf("%d progress lines in %s: more than one per 5 s\n%s", lines, time.Since(start), n.stderr.String())
	}
}

// testProgressTCPClient: a tcp node that does not host, of a world of 3, with nobody serving its endpoint yet: it
// says it has not reached the server; once node 0 serves it (and the third node never comes), it says what the
// server says: who has arrived and who is missing.
func testProgressTCPClient(t *testing.T) {
	t.Parallel()
	ep := testutil.FreeEndpoint(t)
	args := func(isHost, name string) []string {
		return []string{"--device", "cpu", "--nnodes", "3", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "progress",
			"--rdzv-conf", "is_host=" + isHost + ",progress_interval=1", "--rdzv-timeout", neverTimeout, "--node-name", name, "--", self(t)}
	}
	n := startNode(t, append(os.Environ(), testutil.Fake("exit:0")), args("false", "client")...)
	line := lineWith(n.stderr.WaitFor(t, "has not reached the rendezvous server yet"), "has not reached")
	if !strings.Contains(line, ep) || !strings.Contains(line, "the join times out in ") {
		t.Fatalf("the progress line does not name the endpoint %s and the time left:\n%s", ep, line)
	}
	t.Log(line)
	startNode(t, append(os.Environ(), testutil.Fake("exit:0")), args("true", "host")...)
	line = lineWith(n.stderr.WaitFor(t, "(as node 0's server sees it)"), "(as node 0's server sees it)")
	for _, want := range []string{"2 of 3 arrived", `host "client"`, `host "host"`, "missing: node rank 2", "the join times out in "} {
		if !strings.Contains(line, want) {
			t.Fatalf("the joined node's progress line does not say %q:\n%s", want, line)
		}
	}
	t.Log(line)
}

// testProgressEtcd: 2 of 3 nodes on etcd.
func testProgressEtcd(t *testing.T) {
	t.Parallel()
	ep := etcdtest.StartOne(t)
	var nodes []*node
	for i := range 2 {
		nodes = append(nodes, startNode(t, append(os.Environ(), testutil.Fake("exit:0")), "--device", "cpu", "--nnodes", "3", "--rdzv-backend", "etcd",
			"--rdzv-endpoint", ep, "--rdzv-id", "progress", "--rdzv-conf", "progress_interval=1", "--rdzv-timeout", neverTimeout,
			"--node-name", fmt.Sprintf("e%d", i), "--", self(t)))
	}
	// The node counting the registrations names them; the other counts them.
	var named, counted string
	testutil.WaitFor(t, "a progress line from each node, one naming the missing node", func() error {
		named, counted = "", ""
		for _, n := range nodes {
			s := n.stderr.String()
			if l := lineWith(s, "missing: node rank 2;"); l != "" && strings.Contains(l, "2 of 3 arrived") {
				named = l
			} else if l := lineWith(s, "2 of 3 registered"); l != "" {
				counted = l
			}
		}
		if named == "" || counted == "" {
			return fmt.Errorf("named %q, counted %q; node 0:\n%s\nnode 1:\n%s", named, counted, nodes[0].stderr.String(), nodes[1].stderr.String())
		}
		return nil
	})
	for _, l := range []string{named, counted} {
		if !strings.Contains(l, "the join times out in ") {
			t.Fatalf("the progress line does not say how long the join still waits:\n%s", l)
		}
	}
	t.Log(named)
	t.Log(counted)
}

// lineWith is the last line of s that contains substr.
func lineWith(s, substr string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}
