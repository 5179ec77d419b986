package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// lagMeter measures how late this process runs a goroutine that the network or a timer wakes: every lagTick it
// sends itself the time it meant to send (its ticker's tick) over a socket pair, and the reading goroutine, woken
// as a node's goroutine is woken by a reply, sees how late it runs. That is what a node's answer waits for, in the
// server's own process (the benchmarks and tests simulate every node in it) and on a loaded host: run queues
// thousands of goroutines deep, a garbage collection, or the whole process not scheduled for a while. The server
// counts a peer's silence only beyond it: in the handshake (victim) and once joined (live). A meter made without
// newLagMeter measures only what it is told (saw): a node's own lateness at its pings and reads.
//
// It keeps the largest delay seen in each lagBucket of the last lagHistory.
type lagMeter struct {
	mu      sync.Mutex
	base    time.Time
	buckets [lagHistory / lagBucket]struct {
		slot int64 // the bucket's number since base
		d    time.Duration
	}

	stop chan struct{}
	wg   sync.WaitGroup
}

const (
	lagBucket  = 500 * time.Millisecond
	lagHistory = 32 * time.Second
	// lagWindow is how long a delay counts for eviction: a loaded moment, not the last minute.
	lagWindow = time.Second
)

// lagTick is how often the meter measures.
const lagTick = 20 * time.Millisecond

// newLagMeter starts a meter; close stops it. Without a socket pair (no file descriptor left), it measures only
// what saw is told.
func newLagMeter() *lagMeter {
	l := &lagMeter{stop: make(chan struct{}), base: time.Now()}
	w, r, err := socketPair()
	if err != nil {
		return l
	}
	l.wg.Add(2)
	go l.send(w)
	go l.receive(r)
	return l
}

// socketPair is a connected pair of stream sockets, served by the network poller as a node's connection is.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "rendezvous lag meter")
		c, err := net.FileConn(f) // a duplicate, in the poller
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

func (l *lagMeter) send(w net.Conn) {
	defer l.wg.Done()
	defer w.Close() // the receiver reads EOF and ends
	t := time.NewTicker(lagTick)
	defer t.Stop()
	var b [8]byte
	for {
		select {
		case <-l.stop:
			return
		case tick := <-t.C:
			// the tick is when this goroutine should have run: a late ticker counts as lag too
			binary.BigEndian.PutUint64(b[:], uint64(tick.UnixNano()))
			w.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := w.Write(b[:]); err != nil {
				return
			}
		}
	}
}

func (l *lagMeter) receive(r net.Conn) {
	defer l.wg.Done()
	defer r.Close()
	var b [8]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return
		}
		now := time.Now()
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(b[:])))
		l.saw(now.Sub(sent), now)
	}
}

// over is the largest delay seen in the last window (at most lagHistory) before now: none for a nil meter.
func (l *lagMeter) over(window time.Duration, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := l.slot(now)
	d := time.Duration(0)
	for k := max(0, slot-int64(min(window, lagHistory-lagBucket)/lagBucket)); k <= slot; k++ {
		if b := &l.buckets[k%int64(len(l.buckets))]; b.slot == k {
			d = max(d, b.d)
		}
	}
	return d
}

// saw records a delay d seen at now.
func (l *lagMeter) saw(d time.Duration, now time.Time) {
	if l == nil || d <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := l.slot(now)
	b := &l.buckets[slot%int64(len(l.buckets))]
	if b.slot != slot {
		b.slot, b.d = slot, 0
	}
	b.d = max(b.d, d)
}

// slot is now's bucket number (from 1).
func (l *lagMeter) slot(now time.Time) int64 {
	if l.base.IsZero() {
		l.base = now.Add(-lagBucket)
	}
	return int64(max(0, now.Sub(l.base)) / lagBucket)
}

func (l *lagMeter) close() {
	if l.stop == nil {
		return
	}
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}
