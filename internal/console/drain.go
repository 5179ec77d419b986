package console

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Drain is how a worker's pipes are read: until Begin, a read blocks as long as it takes; from Begin on (the
// worker's subtree is gone, so every write end is closed unless a process outside it holds one), each read waits
// at most the idle bound for data: a pipe that yields nothing that long is held by a process outside the subtree.
// A reader that is slow because the console is slow is not idle: the bound starts at each read. The zero value
// blocks; one Drain serves every pipe of one worker.
type Drain struct {
	draining atomic.Bool
	idle     time.Duration
}

// Reader reads f under d.
func (d *Drain) Reader(f *os.File) io.Reader { return drainReader{f, d} }

// Begin bounds every read of d's pipes, from now on and the one under way, to idle without data.
func (d *Drain) Begin(idle time.Duration, pipes ...*os.File) {
	d.idle = idle
	d.draining.Store(true)
	for _, f := range pipes {
		_ = f.SetReadDeadline(time.Now().Add(idle))
	}
}

// drainReader reads one of a worker's pipes under its Drain.
type drainReader struct {
	f *os.File
	d *Drain
}

func (d drainReader) Read(p []byte) (int, error) {
	d.deadline()
	n, err := d.f.Read(p)
	if errors.Is(err, syscall.EIO) { // a pseudo-terminal's master: the end of the output (see readPooled)
		err = io.EOF
	}
	return n, err
}

func (d drainReader) deadline() {
	if d.d.draining.Load() {
		_ = d.f.SetReadDeadline(time.Now().Add(d.d.idle))
	}
}

// readPooled reads what the pipe has into a buffer of readBufs taken only once data (or its end) has arrived: the
// forwarders of hundreds of idle workers hold no buffer while they wait. The caller puts buf back.
func (d drainReader) readPooled() (buf *[]byte, n int, err error) {
	d.deadline()
	rc, err := d.f.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		buf = readBufs.Get().(*[]byte)
		for n, rerr = syscall.Read(int(fd), *buf); rerr == syscall.EINTR; n, rerr = syscall.Read(int(fd), *buf) {
		}
		if rerr == syscall.EAGAIN {
			readBufs.Put(buf)
			buf = nil
			return false // wait in the poller
		}
		return true
	})
	switch {
	case err != nil:
		return buf, 0, err
	case rerr == syscall.EIO: // a pseudo-terminal's master once every slave is closed and its data read (see OpenPty)
		return buf, 0, io.EOF
	case rerr != nil:
		return buf, 0, &os.PathError{Op: "read", Path: d.f.Name(), Err: rerr}
	case n <= 0:
		return buf, 0, io.EOF
	}
	return buf, n, nil
}
