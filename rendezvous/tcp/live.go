package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// Liveness: how a side of a connection decides that its peer is gone.
//
// A peer is lost when its connection drops (a killed process: at once), or when nothing has arrived from it for a
// limit, measured from the last byte received: a node pings every third of the heartbeat and the server answers
// each ping, so silence means a process stopped, a host gone or a network cut. The server loses a node after one
// heartbeat of silence; a node loses the server after two: the server is one process serving every node, which a
// garbage collection of a large world or a loaded host stalls longer than one node, and a node that gives up on
// it ends its part of the job.
//
// A read deadline says only that time passed, not that the peer was silent: a process that was not scheduled (a
// loaded host, thousands of goroutines, a stop) wakes with its deadlines expired and the peer's bytes waiting in the
// socket, or not yet sent by a peer that was starved with it (every node of a benchmark in one process). So the
// limit is extended by twice this side's lag over the last limit, up to the limit again (lagMeter: how late its
// process has run what timers and the network wake; a late deadline is a sample of it, and the server also counts
// the lateness its nodes report with their pings), and bytes waiting to be read mean the peer spoke. A slow
// process is not a dead one; a dead peer is lost after the limit when this side runs on time, and within twice
// the limit however late it runs.

// frameReader reads frames from one connection, keeping a frame that a read deadline cut short, so that the
// reader can read on when the deadline was its own lateness and not the peer's silence. It allocates a body as it
// arrives (at most firstChunk before any byte of it), never as announced.
type frameReader struct {
	r    io.Reader
	max  int
	hdr  [4]byte
	nh   int    // header bytes read
	body []byte // the body so far, once the header is complete
	in   bool   // reading a body
	want int    // its length
	att  bool   // the frame has an attachment (attached)
	last time.Time
	// owed, on a node's side, is when the first ping not followed by any byte from the server was sent (unix
	// nanoseconds; 0: none): the server's silence counts from then, since a server owes nothing to a node that
	// asked nothing (whose own pings were late: its process or host busy). nil on the server's side.
	owed *atomic.Int64
	// joining counts this side's joins under way on the connection: while the world forms (thousands of joins, a
	// share of a pod to send or read), a side busy with it is waited for, not lost; the join's own timeout (the
	// rendezvous timeout) bounds the wait. nil: none.
	joining *atomic.Int32
}

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{r: r, max: max, last: time.Now()}
}

// next reads the next message. io.EOF is returned as is when the stream ends cleanly between frames; after any
// other error but a timeout the reader is done.
func (f *frameReader) next() (*message, error) {
	body, err := f.frame()
	if err != nil {
		return nil, err
	}
	if !f.att {
		return decodeMessage(body)
	}
	if len(body) < 4 || uint64(binary.BigEndian.Uint32(body)) > uint64(len(body)-4) {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("a frame of %d bytes with an attachment is malformed", len(body)))
	}
	n := 4 + int(binary.BigEndian.Uint32(body))
	m, err := decodeMessage(body[4:n])
	if err != nil {
		return nil, err
	}
	m.Table = &agree.SliceTable{}
	if err := m.Table.UnmarshalBinary(body[n:]); err != nil {
		return nil, err
	}
	return m, nil
}

func (f *frameReader) read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if n > 0 {
		f.last = time.Now()
		if f.owed != nil {
			f.owed.Store(0)
		}
	}
	if errors.Is(err, io.EOF) && (f.nh > 0 || f.in) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (f *frameReader) frame() ([]byte, error) {
	for f.nh < len(f.hdr) {
		n, err := f.read(f.hdr[f.nh:])
		f.nh += n
		if err != nil && f.nh < len(f.hdr) {
			return nil, err
		}
	}
	if !f.in {
		n := binary.BigEndian.Uint32(f.hdr[:])
		f.att, n = n&attached != 0, n&^attached
		if uint64(n) > uint64(f.max) {
			return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("message of %d bytes exceeds the limit of %d bytes", n, f.max))
		}
		f.in, f.want, f.body = true, int(n), make([]byte, 0, min(int(n), firstChunk))
	}
	for len(f.body) < f.want {
		if len(f.body) == cap(f.body) { // grown as the bytes arrive: by doubling
			f.body = slices.Grow(f.body, min(f.want-len(f.body), cap(f.body)))
		}
		n, err := f.read(f.body[len(f.body):min(cap(f.body), f.want)])
		f.body = f.body[:len(f.body)+n]
		if err != nil && len(f.body) < f.want {
			return nil, err
		}
	}
	body := f.body
	f.nh, f.in, f.body = 0, false, nil
	return body, nil
}

// silentSince is when the peer's silence began, as of now: its last byte; on a node's side, the first ping it
// left unanswered since (none: now, it owes nothing); now while a join is under way.
func (f *frameReader) silentSince(now time.Time) time.Time {
	if f.joining != nil && f.joining.Load() > 0 {
		return now // the world forms: waited for, within the join's timeout
	}
	if f.owed == nil {
		return f.last
	}
	owed := f.owed.Load()
	if owed == 0 {
		return now
	}
	return time.Unix(0, max(owed, f.last.UnixNano()))
}

// live reads the next message from fr on nc, which loses its peer after limit of silence, and twice lag's more
// (up to the limit again; see Liveness above): an expired deadline ends the read only when the peer was silent.
// The error is then the deadline's (a net.Error whose Timeout is true).
func live(nc net.Conn, fr *frameReader, limit time.Duration, lag *lagMeter) (*message, error) {
	allowed := func(now time.Time) time.Duration { return limit + min(2*lag.over(limit, now), limit) }
	var grace time.Time // bytes waiting: a deadline to read them by
	for {
		deadline := fr.silentSince(time.Now()).Add(allowed(time.Now()))
		if grace.After(deadline) {
			deadline = grace
		}
		nc.SetReadDeadline(deadline)
		m, err := fr.next()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return m, err
		}
		now := time.Now()
		lag.saw(now.Sub(deadline), now) // how late this side woke: its own lag
		switch {
		case now.Sub(fr.silentSince(now)) < allowed(now):
			continue // the peer spoke meanwhile, or this side was late
		case bytesWaiting(nc):
			grace = now.Add(limit / 4) // the peer spoke: this side was late to read it
			continue
		}
		return nil, err
	}
}
