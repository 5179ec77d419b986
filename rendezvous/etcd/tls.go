package etcd

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"tpurun/internal/failure"
	"tpurun/rendezvous/internal/agree"
)

// etcd over TLS, with torchrun's rdzv-conf keys (its etcd backends' _create_etcd_client): protocol (http, the
// default, or https), cacert (the CA that signed etcd's certificate; default the system's roots), cert (this
// node's client certificate, for an etcd run with --client-cert-auth) and key (its private key; without it, cert
// holds both). An endpoint may also say https:// itself; one without a scheme takes the protocol.

// tlsEndpoints is the endpoints with their scheme (https:// when the protocol is https) and the TLS
// configuration they need (nil for plain http). A protocol other than http or https, endpoints of both schemes,
// certificate keys without TLS or a file that does not load are configuration errors naming the key.
func tlsEndpoints(conf map[string]string, eps []string) ([]string, *tls.Config, error) {
	proto := strings.ToLower(conf["protocol"])
	if proto != "" && proto != "http" && proto != "https" {
		return nil, nil, agree.ConfigError(failure.RendezvousOption, "protocol="+conf["protocol"], "the etcd protocol must be http or https")
	}
	secure := proto == "https"
	out := make([]string, len(eps))
	for i, e := range eps {
		switch {
		case strings.HasPrefix(e, "https://"):
			if proto == "http" {
				return nil, nil, agree.ConfigError(failure.RendezvousEndpoint, e, "an https:// endpoint with protocol=http")
			}
			secure = true
			out[i] = e
		case strings.HasPrefix(e, "http://"):
			if proto == "https" {
				return nil, nil, agree.ConfigError(failure.RendezvousEndpoint, e, "an http:// endpoint with protocol=https")
			}
			out[i] = e
		default:
			out[i] = e
			if proto == "https" {
				out[i] = "https://" + e
			}
		}
	}
	if secure {
		for _, e := range out {
			if strings.HasPrefix(e, "http://") {
				return nil, nil, agree.ConfigError(failure.RendezvousEndpoint, strings.Join(eps, ","), "endpoints of both http:// and https://: give etcd one protocol")
			}
		}
	}
	cfg, err := clientTLS(conf, secure)
	return out, cfg, err
}

// clientTLS is the TLS configuration of the keys cacert, cert and key (nil without TLS, where they are refused).
func clientTLS(conf map[string]string, secure bool) (*tls.Config, error) {
	ca, cert, key := conf["cacert"], conf["cert"], conf["key"]
	if !secure {
		for _, k := range []string{"cacert", "cert", "key"} {
			if v, ok := conf[k]; ok {
				return nil, agree.ConfigError(failure.RendezvousOption, k+"="+v, "a certificate for etcd without TLS: add protocol=https, or give https:// endpoints")
			}
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, agree.ConfigError(failure.RendezvousOption, "cacert="+ca, fmt.Sprintf("cannot read the CA certificate: %v", err))
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, agree.ConfigError(failure.RendezvousOption, "cacert="+ca, "no PEM certificate in it")
		}
	}
	switch {
	case cert == "" && key != "":
		return nil, agree.ConfigError(failure.RendezvousOption, "key="+key, "a client key without its certificate: add cert=")
	case cert != "":
		pair, err := tls.LoadX509KeyPair(cert, cmp.Or(key, cert))
		if err != nil {
			return nil, agree.ConfigError(failure.RendezvousOption, "cert="+cert, fmt.Sprintf("cannot load the client certificate and its key: %v", err))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// tlsTrouble says why the TLS handshake with the first endpoint that refuses it fails ("" when every one
// accepts this node, or without TLS): etcd's client only times out when etcd refuses its certificate (or it
// does not trust etcd's), so a join that timed out asks, once, to name the cause. With TLS 1.3 a server refuses a
// client's certificate after the handshake: the probe reads its alert, waiting at most wait.
func tlsTrouble(cfg *tls.Config, eps []string, wait time.Duration) string {
	if cfg == nil {
		return ""
	}
	for _, ep := range eps {
		addr := strings.TrimPrefix(ep, "https://")
		c := cfg.Clone()
		c.ServerName, _, _ = net.SplitHostPort(addr)
		c.NextProtos = []string{"h2"}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", addr, c)
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(wait))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = nil // no alert: the server accepted this node's certificate
			}
		}
		if err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Sprintf("the TLS handshake with etcd at %s fails: %v (check cacert=, cert= and key=: etcd must trust this node's certificate, and this node etcd's)", addr, err)
		}
	}
	return ""
}
