package rendezvous

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConfigValidation: mistakes in the endpoint, token, run id, node counts and ranks are ErrConfig errors from
// New or Join, at once (no join, no timeout), naming the item in the package's words, never a command-line flag.
func TestConfigValidation(t *testing.T) {
	tcp := func(ep, isHost string, n int) Config {
		return Config{Backend: BackendTCP, Endpoint: ep, NNodes: n, NodeRank: -1, Timeout: time.Minute,
			Conf: map[string]string{"is_host": isHost}}
	}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
		kind  error
	}{
		{"port out of range", tcp("127.0.0.1:99999", "false", 2), FieldEndpoint, ErrConfig},
		{"port not a number", tcp("127.0.0.1:http", "false", 2), FieldEndpoint, ErrConfig},
		{"port 0 on a client", tcp("127.0.0.1:0", "false", 2), FieldEndpoint, ErrConfig},
		{"port 0 with is_host=auto", tcp("127.0.0.1:0", "auto", 2), FieldEndpoint, ErrConfig},
		{"bad address", tcp("1.2.3.4.5:29400", "false", 2), FieldEndpoint, ErrConfig},
		{"bad host name", tcp("no such host:29400", "false", 2), FieldEndpoint, ErrConfig},
		{"off loopback without a token", tcp("10.1.2.3:29400", "false", 2), FieldEndpoint, ErrNoToken},
		{"a host name without a token", tcp("node0.example:29400", "false", 2), FieldEndpoint, ErrNoToken},
		{"every interface without a token", tcp(":29400", "false", 2), FieldEndpoint, ErrNoToken},
		{"listen off loopback without a token", with(tcp("127.0.0.1:29400", "true", 2), func(c *Config) { c.Listen = "0.0.0.0:0" }), FieldListen, ErrNoToken},
		{"static hosts without a token", Config{Backend: BackendStatic, NodeRank: 1, Hosts: []string{"tpu-a", "tpu-b"}}, FieldEndpoint, ErrNoToken},
		{"etcd port out of range", Config{Backend: BackendEtcd, Endpoint: "127.0.0.1:2379,127.0.0.1:99999", NNodes: 2, NodeRank: -1}, FieldEndpoint, ErrConfig},
		{"run id with a slash", with(tcp("127.0.0.1:29400", "false", 2), func(c *Config) { c.RunID = "a/b" }), FieldRunID, ErrConfig},
		{"run id ..", with(tcp("127.0.0.1:29400", "false", 2), func(c *Config) { c.RunID = ".." }), FieldRunID, ErrConfig},
		{"run id too long", with(tcp("127.0.0.1:29400", "false", 2), func(c *Config) { c.RunID = strings.Repeat("r", 300) }), FieldRunID, ErrConfig},
		{"min above max", with(tcp("127.0.0.1:29400", "false", 2), func(c *Config) { c.MinNodes = 3 }), FieldMinNodes, ErrConfig},
		{"rank at or above min", with(tcp("127.0.0.1:29400", "false", 4), func(c *Config) { c.MinNodes, c.NodeRank = 2, 2 }), FieldNodeRank, ErrConfig},
		{"elastic static", Config{Backend: BackendStatic, NNodes: 3, MinNodes: 2, NodeRank: 1, Endpoint: "127.0.0.1:29400"}, FieldMinNodes, ErrConfig},
		{"bad last call", with(tcp("127.0.0.1:29400", "false", 2), func(c *Config) { c.Conf["last_call_timeout"] = "soon" }), FieldOption, ErrConfig},
		{"unknown backend", Config{Backend: "zookeeper", NNodes: 2, NodeRank: -1}, FieldBackend, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, err := New(context.Background(), tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("no error")
			}
			e := rdzvErr(t, err, tc.kind)
			if !errors.Is(err, ErrConfig) || e.Field != tc.field {
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
	for _, cfg := range []Config{tcp("127.0.0.1:0", "true", 2), tcp("127.0.0.1:0", "auto", 1)} {
		r, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg.Conf, err)
		}
		if strings.HasSuffix(r.Endpoint(), ":0") || r.Server() == nil {
			t.Fatalf("hosting on port 0: endpoint %s", r.Endpoint())
		}
		r.Close()
	}
}

// TestEveryConfigErrorAvoidsFlags: the configuration errors of TestConfigErrors say what is wrong in the
// package's words.
func TestEveryConfigErrorAvoidsFlags(t *testing.T) {
	for _, cfg := range []Config{
		{Backend: BackendTCP, NNodes: 0, NodeRank: -1},
		{Backend: BackendTCP, NNodes: 2, NodeRank: 2},
		{Backend: BackendTCP, NNodes: 2, NodeRank: -1, Conf: map[string]string{"bogus": "1"}},
		{Backend: BackendTCP, NNodes: 2, NodeRank: -1, Conf: map[string]string{"join_timeout": "-3"}},
		{Backend: BackendTCP, NNodes: 2, NodeRank: -1, Conf: map[string]string{"is_host": "maybe"}},
		{Backend: BackendTCP, NNodes: 2, NodeRank: -1},
		{Backend: BackendStatic, NodeRank: -1},
		{Backend: BackendStatic, NodeRank: 0, NNodes: 3, Hosts: []string{"a", "b"}},
		{Backend: BackendStatic, NodeRank: 1, NNodes: 2},
		{Backend: BackendEtcd, NNodes: 2, NodeRank: -1},
		{Backend: BackendEtcd, NNodes: 2, NodeRank: -1, Endpoint: "a:1,,b:2"},
	} {
		_, err := New(context.Background(), cfg)
		if !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := ParseConf("a=1,b"); !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "--") {
		t.Errorf("ParseConf: %v", err)
	}
}

func TestValidateRunID(t *testing.T) {
	for _, ok := range []string{"run-1", "job_2024.03.01", "a", "torchelastic:abc@host+1", strings.Repeat("x", MaxRunID), "with space", "ünïcode"} {
		if err := ValidateRunID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a\x00b", "a\nb", "tab\there", "\x7f", "bidi\u202egnp.exe", "k=v",
		strings.Repeat("x", MaxRunID+1), "\xff\xfe", " lead", "trail "} {
		err := ValidateRunID(bad)
		var e *Error
		if !errors.Is(err, ErrConfig) || !errors.As(err, &e) || e.Field != FieldRunID {
			t.Errorf("%q: %v, want an ErrConfig naming the run id", bad, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x00\n\t\x7f") || len(err.Error()) > 400 {
			t.Errorf("%q: the message repeats the bad bytes or all of it: %q", bad, err)
		}
	}
}

// TestJoinValidatesMember: a member's run id and host name are checked before anything is sent, and by the
// server on what it receives.
func TestJoinValidatesMember(t *testing.T) {
	s := listen(t, ServerConfig{})
	r, err := New(context.Background(), Config{Backend: BackendTCP, Endpoint: s.Addr(), NNodes: 1, NodeRank: -1, Timeout: 5 * time.Second,
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, m := range []Member{
		{Host: "h", LocalWorkers: 1, Rank: -1, RunID: "../../etc"},
		{Host: "h/../x", LocalWorkers: 1, Rank: -1},
		{Host: "h\nINFO forged log line", LocalWorkers: 1, Rank: -1},
		{Host: "h", LocalWorkers: 1, Rank: -1, Instance: "a/b"},
		{Host: "h", LocalWorkers: 1, Rank: -2},
		{Host: "h", LocalWorkers: 1, Rank: -1, Generation: -2},
	} {
		if _, err := r.Join(context.Background(), m); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", m, err)
		}
	}
	if st := s.Stats(); st.Accepted != 0 {
		t.Fatalf("a bad member reached the server: %+v", st)
	}
}
