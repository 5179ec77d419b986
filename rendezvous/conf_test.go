package rendezvous

import (
	"errors"
	"testing"
	"time"
)

func TestParseConf(t *testing.T) {
	c, err := ParseConf("join_timeout=60, is_host=true")
	if err != nil || c["join_timeout"] != "60" || c["is_host"] != "true" {
		t.Fatalf("%v %v", c, err)
	}
	for _, in := range []string{"x", "=1", "a=1,a=2", "a=1,,b=2"} {
		if _, err := ParseConf(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// TestParseConfTorchrunKeys: torchrun's own --rdzv-conf lines are accepted: its keys with their meaning where
// tpurun has one (timeout aliases join_timeout, heartbeat_timeout and keep_alive_* make the heartbeat),
// the rest kept and checked as known, quotes a test or a shell left around the list or a value dropped, and
// torchrun's booleans for is_host. Unknown keys are still refused.
func TestParseConfTorchrunKeys(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"'join_timeout=5,last_call_timeout=1,timeout=5'": {"join_timeout": "5", "last_call_timeout": "1"},
		"timeout=5": {"join_timeout": "5"},
		`read_timeout="60", close_timeout=10 , is_host=True`: {"read_timeout": "60", "close_timeout": "10", "is_host": "true"},
		"heartbeat_timeout=7,etcd_prefix=/x,is_host=no":      {"heartbeat_timeout": "7", "prefix": "/x", "is_host": "false"},
		"keep_alive_interval=2,keep_alive_max_attempt=4":     {"keep_alive_interval": "2", "keep_alive_max_attempt": "4"},
		"use_libuv=1,store_type=tcp":                         {"use_libuv": "1", "store_type": "tcp"},
		"join_timeout=9,timeout=5":                           {"join_timeout": "9"},
	} {
		c, err := ParseConf(in)
		if err == nil {
			err = CheckConf(c)
		}
		if err != nil || len(c) != len(want) {
			t.Errorf("%s: %v %v, want %v", in, c, err, want)
			continue
		}
		for k, v := range want {
			if c[k] != v {
				t.Errorf("%s: %s=%q, want %q", in, k, c[k], v)
			}
		}
	}
	for _, in := range []string{"garbage", "bogus_key=1", "timeout=1,timeout=2"} {
		c, err := ParseConf(in)
		if err == nil {
			err = CheckConf(c)
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want a config error", in, err)
		}
	}
	if hb, err := heartbeat(map[string]string{"keep_alive_interval": "2", "keep_alive_max_attempt": "4"}, time.Second); err != nil || hb != 8*time.Second/SilentBeats {
		t.Errorf("keep_alive 2 x 4: heartbeat %s %v, want a silence limit of 8s", hb, err)
	}
	if hb, err := heartbeat(map[string]string{"heartbeat_timeout": "9"}, time.Second); err != nil || hb != 9*time.Second/SilentBeats {
		t.Errorf("heartbeat_timeout 9: heartbeat %s %v, want a silence limit of 9s", hb, err)
	}
	if hb, err := heartbeat(map[string]string{"heartbeat_timeout": "9", "heartbeat": "2"}, time.Second); err != nil || hb != 2*time.Second {
		t.Errorf("heartbeat 2 beside heartbeat_timeout 9: %s %v, want 2s", hb, err)
	}
	if hb, err := heartbeat(map[string]string{"keep_alive_interval": "2", "heartbeat": "3"}, time.Second); err != nil || hb != 3*time.Second {
		t.Errorf("heartbeat 3 beside keep_alive_interval 2: %s %v, want 3s", hb, err)
	}
}

// TestWithDefaultPort: an endpoint without a port gets torchrun's default (29400; 2379 for etcd). The backends'
// ports are those they register: the external tests of this package link them all.
func TestWithDefaultPort(t *testing.T) {
	for _, c := range []struct{ backend, in, want string }{
		{"c10d", "127.0.0.1", "127.0.0.1:29400"},
		{"tcp", "node0.example", "node0.example:29400"},
		{"tcp", "::1", "[::1]:29400"},
		{"tcp", "[::1]", "[::1]:29400"},
		{"tcp", "127.0.0.1:0", "127.0.0.1:0"},
		{"etcd", "a,b:2380", "a:2379,b:2380"},
		{"tcp", "", ""},
	} {
		if got := withDefaultPort(c.backend, c.in); got != c.want {
			t.Errorf("%s %q: %q, want %q", c.backend, c.in, got, c.want)
		}
	}
}
