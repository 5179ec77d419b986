package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// TestEtcdTLSClientCertificates: Debian's etcd-server (/usr/bin/etcd, a process of its own) serves https on
// loopback with a throwaway CA and requires client certificates (--client-cert-auth). Nodes given torchrun's keys
// protocol=https, cacert, cert and key form their world on it, and so do nodes given an https:// endpoint and
// cert alone (a file holding the certificate and its key); a node without a client certificate fails its join
// with an error that says the TLS handshake failed, naming the endpoint; a node without the CA fails saying the
// certificate is not trusted.
func TestEtcdTLSClientCertificates(t *testing.T) {
	bin := testutil.Need(t, "etcd") // .ci/deps installs etcd-server; under CI=true a missing etcd fails the test
	testutil.Heavy(t)
	dir := t.TempDir()
	pki := newPKI(t, dir)
	ep := startTLSEtcd(t, bin, dir, pki)

	tlsConf := func(extra map[string]string) func(int, *rendezvous.Config, *rendezvous.Member) {
		return func(_ int, cfg *rendezvous.Config, _ *rendezvous.Member) {
			for k, v := range extra {
				cfg.Conf[k] = v
			}
		}
	}
	t.Run("protocol=https, cacert, cert, key", func(t *testing.T) {
		c := rdzvtest.NewEtcdCluster(t, Name, ep, 2)
		c.Mutate = tlsConf(map[string]string{"protocol": "https", "cacert": pki.ca, "cert": pki.clientCert, "key": pki.clientKey})
		c.Start(context.Background(), nil)
		c.MustJoin()
		c.CheckWorld()
	})
	t.Run("https:// endpoint, cert holding its key", func(t *testing.T) {
		c := rdzvtest.NewEtcdCluster(t, Name, "https://"+ep, 2)
		c.Mutate = tlsConf(map[string]string{"cacert": pki.ca, "cert": pki.clientBoth})
		c.Start(context.Background(), nil)
		c.MustJoin()
		c.CheckWorld()
	})
	for _, tc := range []struct {
		name string
		conf map[string]string
		want []string
	}{
		{"no client certificate", map[string]string{"protocol": "https", "cacert": pki.ca}, []string{"TLS", "certificate", ep}},
		{"no CA", map[string]string{"protocol": "https", "cert": pki.clientCert, "key": pki.clientKey}, []string{"TLS", "certificate", ep}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rendezvous.Config{Backend: Name, Endpoint: ep, NNodes: 2, NodeRank: -1, RunID: "tls", Timeout: rdzvtest.WaitedOut(),
				Conf: map[string]string{"prefix": "/test/" + t.Name() + "/"}}
			for k, v := range tc.conf {
				cfg.Conf[k] = v
			}
			err := joinErr(t, cfg)
			if err == nil {
				t.Fatal("joined etcd without what its TLS requires")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("the error does not say %q: %v", w, err)
				}
			}
			t.Log(err)
		})
	}
}

// joinErr is the error of one node's New and Join with cfg.
func joinErr(t *testing.T, cfg rendezvous.Config) error {
	t.Helper()
	r, err := rendezvous.New(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	s, err := r.Join(context.Background(), rendezvous.Member{Instance: rendezvous.NewInstance(), Host: "h", Addr: "127.0.0.1", LocalWorkers: 1, Rank: -1})
	if s != nil {
		s.Close()
	}
	return err
}

// pki is the files of a throwaway CA: its certificate, etcd's certificate and key (for 127.0.0.1), and a client's
// certificate and key, apart and in one file.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey, clientBoth string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tpurun test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	ca, err := x509.ParseCertificate(caDER)
	must(t, err)
	p := &pki{ca: write(t, dir, "ca.pem", pemOf("CERTIFICATE", caDER))}
	leaf := func(serial int64, name string, usage ...x509.ExtKeyUsage) (cert, key []byte) {
		k := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		must(t, err)
		kb, err := x509.MarshalECPrivateKey(k)
		must(t, err)
		return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kb)
	}
	sc, sk := leaf(2, "etcd", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth) // etcd's gateway dials etcd with it
	cc, ck := leaf(3, "node", x509.ExtKeyUsageClientAuth)
	p.serverCert, p.serverKey = write(t, dir, "server.pem", sc), write(t, dir, "server-key.pem", sk)
	p.clientCert, p.clientKey = write(t, dir, "client.pem", cc), write(t, dir, "client-key.pem", ck)
	p.clientBoth = write(t, dir, "client-both.pem", append(append([]byte{}, cc...), ck...))
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	return k
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func write(t *testing.T, dir, name string, b []byte) string {
	path := filepath.Join(dir, name)
	must(t, os.WriteFile(path, b, 0o600))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startTLSEtcd starts bin as a one-member etcd serving clients over https on a loopback port, requiring client
// certificates signed by the CA, and returns its client host:port once it listens; the test's end kills it.
func startTLSEtcd(t *testing.T, bin, dir string, p *pki) string {
	t.Helper()
	client, peer := testutil.FreeEndpoint(t), testutil.FreeEndpoint(t)
	cmd := exec.Command(bin, "--name", "tls", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+client, "--advertise-client-urls", "https://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer, "--initial-cluster", "tls=http://"+peer,
		"--client-cert-auth", "--trusted-ca-file", p.ca, "--cert-file", p.serverCert, "--key-file", p.serverKey)
	var out testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("etcd's output:\n%s", out.String())
		}
	})
	out.WaitFor(t, "ready to serve client requests")
	return client
}

// TestEtcdTLSConfigErrors: what the TLS keys cannot mean is a configuration error naming the key, before any
// connection: a protocol other than http or https, a certificate without TLS, a key without its certificate, a
// file that does not load, endpoints of both schemes.
func TestEtcdTLSConfigErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "absent.pem")
	for _, tc := range []struct {
		endpoint string
		conf     map[string]string
		want     string
	}{
		{"127.0.0.1:2379", map[string]string{"protocol": "ftp"}, "must be http or https"},
		{"127.0.0.1:2379", map[string]string{"cacert": missing}, "without TLS"},
		{"127.0.0.1:2379", map[string]string{"protocol": "https", "key": missing}, "without its certificate"},
		{"127.0.0.1:2379", map[string]string{"protocol": "https", "cacert": missing}, "cannot read the CA certificate"},
		{"127.0.0.1:2379", map[string]string{"protocol": "https", "cert": missing}, "cannot load the client certificate"},
		{"https://127.0.0.1:2379,http://127.0.0.1:2380", nil, "both http:// and https://"},
		{"https://127.0.0.1:2379", map[string]string{"protocol": "http"}, "with protocol=http"},
	} {
		conf := map[string]string{}
		for k, v := range tc.conf {
			conf[k] = v
		}
		_, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, Endpoint: tc.endpoint, NNodes: 2, NodeRank: -1, Conf: conf})
		if !errors.Is(err, rendezvous.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v; want an ErrConfig saying %q", tc.endpoint, tc.conf, err, tc.want)
		}
	}
}
