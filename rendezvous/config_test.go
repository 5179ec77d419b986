package rendezvous_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"tpurun/internal/setting"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static"
	"tpurun/rendezvous/tcp"
)

// TestConfigValidation: mistakes in the endpoint, token, run id, node counts and ranks are ErrConfig errors from
// New or Join, at once (no join, no timeout), naming the item in the package's words, never a command-line flag.
func TestConfigValidation(t *testing.T) {
	tcpConfig := func(ep, isHost string, n int) rendezvous.Config {
		return rendezvous.Config{Backend: tcp.Name, Endpoint: ep, NNodes: n, NodeRank: -1, Timeout: time.Minute,
			Conf: map[string]string{"is_host": isHost}}
	}
	with := func(c rendezvous.Config, f func(*rendezvous.Config)) rendezvous.Config { f(&c); return c }
	for _, tc := range []struct {
		name  string
		cfg   rendezvous.Config
		field setting.Setting
		kind  error
	}{
		{"port out of range", tcpConfig("127.0.0.1:99999", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port not a number", tcpConfig("127.0.0.1:http", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port 0 on a client", tcpConfig("127.0.0.1:0", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port 0 with is_host=auto", tcpConfig("127.0.0.1:0", "auto", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"bad address", tcpConfig("1.2.3.4.5:29400", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"bad host name", tcpConfig("no such host:29400", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"off loopback without a token", tcpConfig("10.1.2.3:29400", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"a host name without a token", tcpConfig("node0.example:29400", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"every interface without a token", tcpConfig(":29400", "false", 2), setting.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"listen off loopback without a token", with(tcpConfig("127.0.0.1:29400", "true", 2), func(c *rendezvous.Config) { c.Listen = "0.0.0.0:0" }), setting.RendezvousListen, rendezvous.ErrNoToken},
		{"static hosts without a token", rendezvous.Config{Backend: static.Name, NodeRank: 1, Hosts: []string{"tpu-a", "tpu-b"}}, setting.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"etcd port out of range", rendezvous.Config{Backend: etcd.Name, Endpoint: "127.0.0.1:2379,127.0.0.1:99999", NNodes: 2, NodeRank: -1}, setting.RendezvousEndpoint, rendezvous.ErrConfig},
		{"run id with a slash", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = "a/b" }), setting.RendezvousRunID, rendezvous.ErrConfig},
		{"run id ..", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = ".." }), setting.RendezvousRunID, rendezvous.ErrConfig},
		{"run id too long", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = strings.Repeat("r", 300) }), setting.RendezvousRunID, rendezvous.ErrConfig},
		{"min above max", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.MinNodes = 3 }), setting.RendezvousMinNodes, rendezvous.ErrConfig},
		{"rank at or above min", with(tcpConfig("127.0.0.1:29400", "false", 4), func(c *rendezvous.Config) { c.MinNodes, c.NodeRank = 2, 2 }), setting.RendezvousNodeRank, rendezvous.ErrConfig},
		{"elastic static", rendezvous.Config{Backend: static.Name, NNodes: 3, MinNodes: 2, NodeRank: 1, Endpoint: "127.0.0.1:29400"}, setting.RendezvousMinNodes, rendezvous.ErrConfig},
		{"bad last call", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.Conf["last_call_timeout"] = "soon" }), setting.RendezvousOption, rendezvous.ErrConfig},
		{"unknown backend", rendezvous.Config{Backend: "zookeeper", NNodes: 2, NodeRank: -1}, setting.RendezvousBackend, rendezvous.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, err := rendezvous.New(context.Background(), tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("no error")
			}
			e := rdzvtest.RdzvErr(t, err, tc.kind)
			if !errors.Is(err, rendezvous.ErrConfig) || e.Field != tc.field {
				t.Fatalf("%v: field %q, want %q and ErrConfig", err, e.Field, tc.field)
			}
			if strings.Contains(err.Error(), "--") {
				t.Fatalf("%q names a command-line flag", err)
			}
			if el := time.Since(start); el > time.Second {
				t.Fatalf("took %s", el)
			}
			t.Log(err)
		})
	}
	// where port 0 is fine: the node that hosts, or a world of one
	for _, cfg := range []rendezvous.Config{tcpConfig("127.0.0.1:0", "true", 2), tcpConfig("127.0.0.1:0", "auto", 1)} {
		r, err := rendezvous.New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg.Conf, err)
		}
		if strings.HasSuffix(r.Endpoint(), ":0") || tcp.HostedServer(r) == nil {
			t.Fatalf("hosting on port 0: endpoint %s", r.Endpoint())
		}
		r.Close()
	}
}

// TestEveryConfigErrorAvoidsFlags: the configuration errors of TestConfigErrors say what is wrong in the
// package's words.
func TestEveryConfigErrorAvoidsFlags(t *testing.T) {
	for _, cfg := range []rendezvous.Config{
		{Backend: tcp.Name, NNodes: 0, NodeRank: -1},
		{Backend: tcp.Name, NNodes: 2, NodeRank: 2},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"bogus": "1"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"join_timeout": "-3"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"is_host": "maybe"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1},
		{Backend: static.Name, NodeRank: -1},
		{Backend: static.Name, NodeRank: 0, NNodes: 3, Hosts: []string{"a", "b"}},
		{Backend: static.Name, NodeRank: 1, NNodes: 2},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1, Endpoint: "a:1,,b:2"},
	} {
		_, err := rendezvous.New(context.Background(), cfg)
		if !errors.Is(err, rendezvous.ErrConfig) || strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := rendezvous.ParseConf("a=1,b"); !errors.Is(err, rendezvous.ErrConfig) || strings.Contains(err.Error(), "--") {
		t.Errorf("ParseConf: %v", err)
	}
}

func TestValidateRunID(t *testing.T) {
	for _, ok := range []string{"run-1", "job_2024.03.01", "a", "torchelastic:abc@host+1", strings.Repeat("x", rendezvous.MaxRunID), "with space", "ünïcode"} {
		if err := rendezvous.ValidateRunID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a\x00b", "a\nb", "tab\there", "\x7f", "bidi\u202egnp.exe", "k=v",
		strings.Repeat("x", rendezvous.MaxRunID+1), "\xff\xfe", " lead", "trail "} {
		err := rendezvous.ValidateRunID(bad)
		var e *rendezvous.Error
		if !errors.Is(err, rendezvous.ErrConfig) || !errors.As(err, &e) || e.Field != setting.RendezvousRunID {
			t.Errorf("%q: %v, want an ErrConfig naming the run id", bad, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x00\n\t\x7f") || len(err.Error()) > 400 {
			t.Errorf("%q: the message repeats the bad bytes or all of it: %q", bad, err)
		}
	}
}
