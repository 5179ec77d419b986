package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// The handshake opens every connection to the embedded server, before any message may be sent. Both sides prove
// they hold the same token without sending it (HMAC-SHA256 over two fresh nonces), and the server reads the
// handshake with small fixed buffers under a deadline (ServerConfig.AuthTimeout): a peer without the token never
// makes the server allocate more than these few bytes, and never reaches the message reader.
//
//	client -> server  hello:     "TPRZ" | version u16 | 0 u16 | client nonce [32]
//	server -> client  challenge: "TPRZ" | version u16 | status u16 | server nonce [32] | server proof [32]
//	client -> server  proof:     client proof [32]
//	server -> client  verdict:   status u16 | 0 u16
//
// server proof = HMAC-SHA256(token, "tpurun rendezvous server" | client nonce | server nonce), client proof the
// same with "tpurun rendezvous client". A server without a token (loopback only) accepts any client proof.
const (
	helloMagic     = "TPRZ"
	nonceLen       = 32
	proofLen       = sha256.Size
	clientHelloLen = 8 + nonceLen
	challengeLen   = 8 + nonceLen + proofLen
	verdictLen     = 4

	serverLabel = "tpurun rendezvous server"
	clientLabel = "tpurun rendezvous client"
)

// Handshake statuses (challenge and verdict).
const (
	statusOK       = 0
	statusVersion  = 1 // the client's version is not the server's (challenge)
	statusBadToken = 2 // the client's proof is wrong (verdict)
	statusFull     = 3 // the server has MaxConns authenticated connections (verdict)
)

func proof(token, label string, cn, sn []byte) []byte {
	h := hmac.New(sha256.New, []byte(token))
	h.Write([]byte(label))
	h.Write(cn)
	h.Write(sn)
	return h.Sum(nil)
}

func verdict(status uint16) []byte {
	var b [verdictLen]byte
	binary.BigEndian.PutUint16(b[:], status)
	return b[:]
}

// clientHandshake runs the client's side on nc, bounded by deadline. Its *Error results other than ErrStoreLost
// are final (wrong token, other version, not a rendezvous server); anything else may be retried.
func clientHandshake(nc net.Conn, addr, token string, deadline time.Time) error {
	nc.SetDeadline(deadline)
	defer nc.SetDeadline(time.Time{})
	var hello [clientHelloLen]byte
	copy(hello[:], helloMagic)
	binary.BigEndian.PutUint16(hello[4:], Version)
	cn := hello[8:]
	rand.Read(cn)
	if _, err := nc.Write(hello[:]); err != nil {
		return err
	}
	var ch [challengeLen]byte
	if _, err := io.ReadFull(nc, ch[:4]); err != nil {
		return err
	}
	if string(ch[:4]) != helloMagic {
		return notHandshake(nc, addr, ch[:4])
	}
	if _, err := io.ReadFull(nc, ch[4:]); err != nil {
		return err
	}
	v, status := binary.BigEndian.Uint16(ch[4:]), binary.BigEndian.Uint16(ch[6:])
	if status == statusVersion || v != Version {
		return agree.NewError(rendezvous.ErrVersion, fmt.Sprintf("the rendezvous server at %s speaks protocol version %d and this node version %d; run the same tpurun version on every node", addr, v, Version))
	}
	if status != statusOK {
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("the rendezvous server at %s answered the handshake with status %d", addr, status))
	}
	sn := ch[8 : 8+nonceLen]
	if !hmac.Equal(ch[8+nonceLen:], proof(token, serverLabel, cn, sn)) {
		has := "another token than this node"
		if token == "" {
			has = "a token and this node none"
		}
		return agree.NewError(rendezvous.ErrBadToken, fmt.Sprintf("the rendezvous server at %s holds %s; give every node the same token", addr, has))
	}
	if _, err := nc.Write(proof(token, clientLabel, cn, sn)); err != nil {
		return err
	}
	var vd [verdictLen]byte
	if _, err := io.ReadFull(nc, vd[:]); err != nil {
		return err
	}
	switch binary.BigEndian.Uint16(vd[:]) {
	case statusOK:
		return nil
	case statusBadToken:
		return agree.NewError(rendezvous.ErrBadToken, fmt.Sprintf("the rendezvous server at %s refused this node's token; give every node the same token", addr))
	case statusFull:
		return agree.StoreLost(addr, "the rendezvous server has its maximum of connections")
	}
	return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("the rendezvous server at %s answered the handshake with verdict %x", addr, vd))
}

// notHandshake explains a server that answered the hello with something else than a challenge: a version 1
// server answers with a framed "rejected" message (the hello read as a frame length is too long).
func notHandshake(nc net.Conn, addr string, hdr []byte) error {
	if n := binary.BigEndian.Uint32(hdr); n <= 1<<16 {
		if body, err := readBody(nc, int(n)); err == nil {
			var m struct {
				V    int    `json:"v"`
				Type string `json:"type"`
			}
			if json.Unmarshal(body, &m) == nil && m.V > 0 && m.Type != "" {
				return agree.NewError(rendezvous.ErrVersion, fmt.Sprintf("the rendezvous server at %s speaks protocol version %d (an older tpurun) and this node version %d; run the same tpurun version on every node", addr, m.V, Version))
			}
		}
	}
	return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("the server at %s is not a tpurun rendezvous server (it answered %q); check the endpoint", addr, hdr))
}

// pending is an accepted connection that has not completed the handshake. Guarded by Server.mu.
type pending struct {
	nc      net.Conn
	at      time.Time
	started bool // its handshake read the hello's magic: evicted only after those that have not begun one
	// waiting is when the server began to wait for the peer's next bytes (the start of a handshake read); zero
	// while the handshake is the server's to do (its goroutine not started yet, reading what arrived, computing,
	// writing).
	// Only the peer's own silence counts towards its eviction, never a slow (loaded) server's.
	waiting time.Time
	waited  time.Duration // the time spent waiting for the peer so far
}

// v1Refusal tells a version 1 client, in its own framing, why it cannot join.
var v1Refusal = &message{V: 1, Type: msgRejected, Error: &agree.WireError{Code: "protocol",
	Detail: fmt.Sprintf("this rendezvous server speaks protocol version %d (a newer tpurun) and the client version 1; run the same tpurun version on every node", Version)}}

// handshake authenticates pc and then serves it. It reads only the fixed-size handshake, under the auth deadline.
func (s *Server) handshake(pc *pending) {
	defer s.wg.Done()
	nc := pc.nc
	remote := nc.RemoteAddr().String()
	nc.SetDeadline(pc.at.Add(s.cfg.AuthTimeout))
	// refuse counts the refusal, then tells the client (say, when there is a last word for it) and hangs up: a
	// client that saw its refusal reads the server's stats with it counted.
	refuse := func(reason string, err error, say ...func()) {
		if s.unpend(pc) { // an evicted connection was counted when it was evicted
			s.tally.refused(reason, remote, err)
		}
		for _, f := range say {
			f()
		}
		nc.Close()
	}
	now := time.Now()
	s.lag.saw(now.Sub(pc.at), now)
	var hello [clientHelloLen]byte
	if _, err := s.readPeer(pc, hello[:4]); err != nil {
		refuse(ioReason(err), err)
		return
	}
	if string(hello[:4]) != helloMagic {
		err := fmt.Errorf("first bytes %q are not a tpurun handshake", hello[:4])
		if hello[0] == 0 { // a plausible version 1 frame header: answer in version 1
			refuse(reasonBadHello, err, func() { writeFrame(nc, v1Refusal, 1<<16) })
			return
		}
		refuse(reasonBadHello, err)
		return
	}
	s.mu.Lock()
	pc.started = true
	s.mu.Unlock()
	if _, err := s.readPeer(pc, hello[4:]); err != nil {
		refuse(ioReason(err), err)
		return
	}
	var ch [challengeLen]byte
	copy(ch[:], helloMagic)
	binary.BigEndian.PutUint16(ch[4:], Version)
	if v := binary.BigEndian.Uint16(hello[4:]); v != Version {
		binary.BigEndian.PutUint16(ch[6:], statusVersion)
		refuse(reasonVersion, fmt.Errorf("client speaks protocol version %d, this server %d", v, Version),
			func() { nc.Write(ch[:]) })
		return
	}
	cn, sn := hello[8:], ch[8:8+nonceLen]
	rand.Read(sn)
	copy(ch[8+nonceLen:], proof(s.cfg.Token, serverLabel, cn, sn))
	if _, err := nc.Write(ch[:]); err != nil {
		refuse(ioReason(err), err)
		return
	}
	var p [proofLen]byte
	if _, err := s.readPeer(pc, p[:]); err != nil {
		refuse(ioReason(err), err)
		return
	}
	if s.cfg.Token != "" && !hmac.Equal(p[:], proof(s.cfg.Token, clientLabel, cn, sn)) {
		refuse(reasonBadToken, errors.New("wrong token"), func() { nc.Write(verdict(statusBadToken)) })
		return
	}
	c, status := s.admit(pc)
	if c == nil {
		if status == statusFull {
			// counted before the client is told, as refuse does
			s.tally.refused(reasonFull, remote, fmt.Errorf("%d authenticated connections", s.cfg.MaxConns))
			nc.Write(verdict(statusFull))
		}
		nc.Close()
		return
	}
	if _, err := nc.Write(verdict(statusOK)); err != nil {
		s.log.Debug("rendezvous handshake verdict not delivered", zap.String("remote", remote), zap.Error(err))
	}
	nc.SetDeadline(time.Time{})
	s.serve(c)
}

// readPeer reads the next part of pc's handshake, marking the wait for the peer (see pending.waiting).
func (s *Server) readPeer(pc *pending, b []byte) (int, error) {
	s.mu.Lock()
	if pc.waiting.IsZero() {
		pc.waiting = time.Now()
	}
	s.mu.Unlock()
	n, err := io.ReadFull(pc.nc, b)
	s.mu.Lock()
	pc.waited += time.Since(pc.waiting)
	pc.waiting = time.Time{}
	s.mu.Unlock()
	return n, err
}

// ioReason classifies a failed handshake read or write.
func ioReason(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return reasonTimedOut
	}
	return reasonHungUp
}
