package tcp

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"tpurun/internal/testutil"
)

// livePair is a loopback TCP connection: the side under test, and its peer.
func livePair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, peer
}

// TestLiveReadsWhatArrived: a side that wakes past its deadline (here: its last byte heard long ago, as after a
// process that was not scheduled) with the peer's ping waiting in the socket reads it: the peer spoke, it was not
// silent. A read deadline alone would have declared it lost.
func TestLiveReadsWhatArrived(t *testing.T) {
	nc, peer := livePair(t)
	if err := writeMessage(peer, &message{Type: msgPing}, DefaultMaxMessage); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the ping to arrive", func() bool { return bytesWaiting(nc) })
	const limit = time.Hour
	fr := newFrameReader(nc, DefaultMaxMessage)
	fr.last = time.Now().Add(-limit - time.Minute) // the deadline passed before the read
	m, err := live(nc, fr, limit, &lagMeter{})
	if err != nil || m.Type != msgPing {
		t.Fatalf("read %+v, %v; want the ping that was waiting", m, err)
	}
}

// TestLiveFrameCutByDeadline: a frame whose first bytes arrived before a deadline and the rest after is read
// whole: the reader keeps what it read across the deadline.
func TestLiveFrameCutByDeadline(t *testing.T) {
	nc, peer := livePair(t)
	f, err := encodeFrame(&message{Type: msgPublish, Name: "k", Data: []byte("data")}, DefaultMaxMessage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write(f[:7]); err != nil {
		t.Fatal(err)
	}
	fr := newFrameReader(nc, DefaultMaxMessage)
	nc.SetReadDeadline(time.Now().Add(10 * time.Millisecond)) // only the first bytes are sent: this one passes
	if _, err := fr.next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("first read: %v, want the deadline", err)
	}
	if _, err := peer.Write(f[7:]); err != nil {
		t.Fatal(err)
	}
	m, err := live(nc, fr, testutil.Deadline(), &lagMeter{})
	if err != nil || m.Type != msgPublish || string(m.Data) != "data" {
		t.Fatalf("read %+v, %v; want the whole frame", m, err)
	}
}

// TestLiveSilentPeerIsLost: a peer that sends nothing is lost after the limit, not before; a side that finds
// itself late at its deadline (its process was not running) gives the peer twice its lateness more.
func TestLiveSilentPeerIsLost(t *testing.T) {
	nc, _ := livePair(t)
	limit := testutil.Scaled(200 * time.Millisecond)
	fr := newFrameReader(nc, DefaultMaxMessage)
	start := fr.last
	_, err := live(nc, fr, limit, &lagMeter{})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent peer: %v, want the deadline's error", err)
	}
	if el := time.Since(start); el < limit {
		t.Fatalf("silent peer lost after %s, before the limit %s", el, limit)
	}
	// late: the last byte was heard a limit and a half ago, so the deadline had passed by half the limit when the
	// read began
	fr.last = time.Now().Add(-limit * 3 / 2)
	start = time.Now()
	_, err = live(nc, fr, limit, &lagMeter{})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent peer, late side: %v, want the deadline's error", err)
	}
	if el := time.Since(start); el < limit*2/5 {
		t.Fatalf("a side late by half the limit lost its peer after %s more, want about half the limit (%s) more", el, limit/2)
	}
}
