package results

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tpurun/internal/testutil"
	"tpurun/worker"
)

// TestConsumeReturnsOnDeadline: when the launcher stops draining (a read deadline on the pipe, e.g. a grandchild
// keeps the write end open), Consume returns at once, keeps what arrived and says why.
func TestConsumeReturnsOnDeadline(t *testing.T) {
	for _, midFrame := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c := NewCollector(Options{})
		if err := worker.NewClient(w, []int{0}).Report(0, "kept"); err != nil {
			t.Fatal(err)
		}
		if midFrame {
			w.Write(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, 0, 10))
		}
		consumed := make(chan error, 1)
		go func() { consumed <- c.Consume(0, 1, []int{0}, r) }()
		// The deadline passes once Consume took everything written (the result kept, the pipe empty): it is then
		// waiting for more, as behind a grandchild that keeps the write end open.
		testutil.WaitFor(t, "Consume to take everything written", func() error {
			if n := len(c.Share().Results); n != 1 {
				return fmt.Errorf("%d results", n)
			}
			if n := unread(t, r); n != 0 {
				return fmt.Errorf("%d bytes unread", n)
			}
			return nil
		})
		r.SetReadDeadline(time.Now())
		err = testutil.Done(t, "Consume to return at the deadline", consumed)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("midFrame=%v: %v, want it to wrap os.ErrDeadlineExceeded", midFrame, err)
		}
		if got := errors.Is(err, ErrTruncatedFrame); got != midFrame {
			t.Fatalf("midFrame=%v: truncated_frame=%v: %v", midFrame, got, err)
		}
		if e := c.Share().Results; len(e) != 1 || string(e[0].Value) != `"kept"` {
			t.Fatalf("entries %+v", e)
		}
		w.Close()
		r.Close()
	}
}

// unread is the number of bytes in the pipe r that nobody has read yet (FIONREAD, alias TIOCINQ), without making r blocking.
func unread(t *testing.T, r *os.File) int {
	t.Helper()
	sc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	var ierr error
	if err := sc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil {
		t.Fatalf("TIOCINQ: %v %v", err, ierr)
	}
	return n
}
