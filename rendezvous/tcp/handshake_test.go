package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// v1Frame is a frame as version 1 clients and servers wrote it.
func v1Frame(m map[string]any) []byte {
	body, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	return b
}

// TestVersion1ClientIsToldWhy: a version 1 client (no handshake, token in every message) gets, in its own
// framing, a rejection that says the server speaks version 2; the server counts it and allocates nothing for it.
func TestVersion1ClientIsToldWhy(t *testing.T) {
	s := listen(t, ServerConfig{Token: "tok"})
	nc := dialRaw(t, s.Addr())
	nc.Write(v1Frame(map[string]any{"v": 1, "type": "join", "id": 1, "token": "tok", "nnodes": 2,
		"member": map[string]any{"instance": "abc", "host": "old", "local_workers": 1, "rank": -1}}))
	nc.SetReadDeadline(time.Now().Add(testutil.Deadline()))
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	var m struct {
		V     int
		Type  string
		Error struct{ Code, Detail string }
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	if m.V != 1 || m.Type != "rejected" || m.Error.Code != "protocol" || !strings.Contains(m.Error.Detail, fmt.Sprintf("protocol version %d", Version)) ||
		!strings.Contains(m.Error.Detail, "same tpurun version") {
		t.Fatalf("answer %+v, want a version 1 rejection naming version %d", m, Version)
	}
	if _, err := io.ReadFull(nc, hdr[:1]); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the rejection: %v, want the server to hang up", err)
	}
	if st := s.Stats(); st.Refused["bad_hello"] != 1 || st.Authenticated != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// fakeV1Server answers every connection as a version 1 server did: it reads the first 4 bytes as a frame length,
// refuses it as too long, and hangs up.
func fakeV1Server(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			var hdr [4]byte
			if _, err := io.ReadFull(nc, hdr[:]); err == nil {
				n := binary.BigEndian.Uint32(hdr[:])
				nc.Write(v1Frame(map[string]any{"v": 1, "type": "rejected", "error": map[string]any{"code": "protocol",
					"detail": fmt.Sprintf("message of %d bytes exceeds the limit of 4194304 bytes", n)}}))
			}
			nc.Close()
		}
	}()
	return ln.Addr().String()
}

// TestVersion1ServerIsNamed: a node joining a version 1 server fails at once with ErrVersion, not after the
// join timeout.
func TestVersion1ServerIsNamed(t *testing.T) {
	addr := fakeV1Server(t)
	r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, Endpoint: addr, NNodes: 2, NodeRank: -1, Timeout: 20 * time.Second,
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	_, err = r.Join(context.Background(), rendezvous.Member{Host: "new", Addr: "127.0.0.1", LocalWorkers: 1, Rank: -1})
	e := rdzvtest.RdzvErr(t, err, rendezvous.ErrVersion)
	if !errors.Is(err, rendezvous.ErrProtocol) || !strings.Contains(e.Detail, "protocol version 1") || !strings.Contains(e.Detail, addr) {
		t.Fatalf("%v: want the server's version and address", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %s", el)
	}
}

// TestFutureVersion: a hello of another version is answered with the server's version, and the client says so.
func TestFutureVersion(t *testing.T) {
	s := listen(t, ServerConfig{})
	nc := dialRaw(t, s.Addr())
	var hello [clientHelloLen]byte
	copy(hello[:], helloMagic)
	binary.BigEndian.PutUint16(hello[4:], Version+1)
	nc.Write(hello[:])
	var ch [challengeLen]byte
	nc.SetReadDeadline(time.Now().Add(testutil.Deadline()))
	if _, err := io.ReadFull(nc, ch[:]); err != nil {
		t.Fatal(err)
	}
	if string(ch[:4]) != helloMagic || binary.BigEndian.Uint16(ch[4:]) != Version || binary.BigEndian.Uint16(ch[6:]) != statusVersion {
		t.Fatalf("challenge %x", ch[:8])
	}
	// and a client meeting a server of another version
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var h [clientHelloLen]byte
		io.ReadFull(c, h[:])
		var out [challengeLen]byte
		copy(out[:], helloMagic)
		binary.BigEndian.PutUint16(out[4:], Version+1)
		binary.BigEndian.PutUint16(out[6:], statusVersion)
		c.Write(out[:])
	}()
	c := dialRaw(t, ln.Addr().String())
	err = clientHandshake(c, ln.Addr().String(), "", time.Now().Add(testutil.Deadline()))
	if e := rdzvtest.RdzvErr(t, err, rendezvous.ErrVersion); !strings.Contains(e.Detail, fmt.Sprintf("version %d", Version+1)) {
		t.Fatalf("%v", err)
	}
}

// recorder is a TCP proxy that keeps every byte a client sent.
type recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func proxy(t *testing.T, to string, rec *recorder) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(io.MultiWriter(u, rec), c); u.Close() }()
			go func() { defer wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// TestTokenNeverOnTheWire: a node proves its token without sending it; a wrong token, no token, or a server
// without the token (an impostor on the port) fail at once with ErrBadToken.
func TestTokenNeverOnTheWire(t *testing.T) {
	const token = "s3cret-token-value"
	s := listen(t, ServerConfig{Token: token})
	var rec recorder
	sess, err := joinOne(t, proxy(t, s.Addr(), &rec), token)
	if err != nil {
		t.Fatal(err)
	}
	sess.Barrier(context.Background(), "b")
	rec.mu.Lock()
	sent := rec.buf.Bytes()
	rec.mu.Unlock()
	if len(sent) < clientHelloLen+proofLen || bytes.Contains(sent, []byte(token)) || bytes.Contains(sent, []byte("s3cret")) {
		t.Fatalf("the client sent %d bytes, holding the token: %q", len(sent), sent)
	}
	impostor := listen(t, ServerConfig{})
	start := time.Now()
	_, err = joinOne(t, impostor.Addr(), token)
	if e := rdzvtest.RdzvErr(t, err, rendezvous.ErrBadToken); !strings.Contains(e.Detail, "another token") {
		t.Fatalf("%v", err)
	}
	_, err = joinOne(t, s.Addr(), "")
	if e := rdzvtest.RdzvErr(t, err, rendezvous.ErrBadToken); !strings.Contains(e.Detail, "this node none") {
		t.Fatalf("%v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("refused after %s", el)
	}
	if st := s.Stats(); st.Authenticated != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestServerRefusesWrongProof: a client that knows the protocol but not the token is refused after its proof,
// before any message is read; the refusal is counted as bad_token.
func TestServerRefusesWrongProof(t *testing.T) {
	s := listen(t, ServerConfig{Token: "right"})
	nc := dialRaw(t, s.Addr())
	// a handshake with the wrong key, seen from the raw side: the server's challenge proof does not match, so
	// answer with a made-up proof
	var hello [clientHelloLen]byte
	copy(hello[:], helloMagic)
	binary.BigEndian.PutUint16(hello[4:], Version)
	nc.Write(hello[:])
	var ch [challengeLen]byte
	nc.SetReadDeadline(time.Now().Add(testutil.Deadline()))
	if _, err := io.ReadFull(nc, ch[:]); err != nil {
		t.Fatal(err)
	}
	nc.Write(make([]byte, proofLen))
	var vd [verdictLen]byte
	if _, err := io.ReadFull(nc, vd[:]); err != nil || binary.BigEndian.Uint16(vd[:]) != statusBadToken {
		t.Fatalf("verdict %x %v", vd, err)
	}
	if _, err := nc.Read(vd[:1]); err != io.EOF {
		t.Fatalf("after a wrong proof: %v, want the server to hang up", err)
	}
	if st := s.Stats(); st.Refused["bad_token"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}
