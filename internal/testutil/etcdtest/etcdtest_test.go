package etcdtest

import (
	"errors"
	"net"
	"net/url"
	"syscall"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"
)

// TestPortTakenIsAddrInUse: etcd's error for a port another process took between the pick and the bind is
// EADDRINUSE through its wrapping, which start retries on new ports (a bind race seen once in 20 runs of TestEtcd
// under two CPU hogs).
func TestPortTakenIsAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "panic"
	taken := url.URL{Scheme: "http", Host: l.Addr().String()}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{taken}, []url.URL{taken}
	cfg.InitialCluster = cfg.Name + "=" + taken.String()
	e, err := embed.StartEtcd(cfg)
	if err == nil {
		e.Close()
		t.Fatal("etcd started on a port already taken")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("etcd on a taken port: %v, want an error that is EADDRINUSE", err)
	}
}
