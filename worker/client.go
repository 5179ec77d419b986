package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrForeignReplica means a worker tried to report a replica it does not own.
var ErrForeignReplica = fmt.Errorf("replica not owned by this worker")

// ErrBrokenChannel means a write to the result channel failed, perhaps part-way through a frame. The client sends
// nothing after that: the launcher would read a later frame as the rest of the cut one.
var ErrBrokenChannel = errors.New("result channel broken by a failed write")

// Client writes frames to a result channel. It is safe for concurrent use; each frame is written whole, header and
// payload in one write, under a lock, so frames from several goroutines never interleave. After a failed write
// every later Send fails with ErrBrokenChannel and writes nothing.
type Client struct {
	mu       sync.Mutex
	w        io.Writer
	replicas []int
	broken   error // the failed write that broke the channel (wraps ErrBrokenChannel)
}

// NewClient returns a client writing to w for a worker that owns replicas (nil: any replica may be reported).
func NewClient(w io.Writer, replicas []int) *Client {
	return &Client{w: w, replicas: slices.Clone(replicas)}
}

// Open returns the client of the channel the launcher handed this process (TPURUN_RESULT_FD, TPURUN_REPLICAS).
// It refuses a descriptor that is not open, not writable, or (when TPURUN_RESULT_ID is set) not the pipe that
// variable names, and marks the descriptor close-on-exec, so programs this worker starts never inherit it.
func Open() (*Client, error) {
	v := os.Getenv(EnvResultFD)
	if v == "" {
		return nil, &EnvError{Var: EnvResultFD, Err: ErrNoChannel}
	}
	fd, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || fd < 0 {
		return nil, &EnvError{Var: EnvResultFD, Value: v, Err: ErrBadEnv, Detail: "not a file descriptor number"}
	}
	if err := channelProblem(fd, v, os.Getenv); err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	replicas, err := Replicas()
	if err != nil {
		return nil, err
	}
	return NewClient(os.NewFile(uintptr(fd), "tpurun-results"), replicas), nil
}

// Replicas returns the replicas the client's worker owns.
func (c *Client) Replicas() []int { return slices.Clone(c.replicas) }

// Report sends value, encoded as JSON, as the result of replica. A json.RawMessage is sent as is. JSON the launcher
// would refuse (invalid, not UTF-8, nested too deep) is refused here; a value holding an integer of more than
// MaxJSONIntDigits digits (a *big.Int) with a *HugeIntegerError (ErrHugeInteger): send it as a string.
func (c *Client) Report(replica int, value any) error {
	payload, raw := value.(json.RawMessage)
	if !raw {
		b, err := json.Marshal(value)
		if err != nil {
			return fmt.Errorf("result of replica %d: encode %T as JSON: %w", replica, value, err)
		}
		payload = b
	}
	var huge *HugeIntegerError
	switch err := CheckJSON(payload); {
	case errors.As(err, &huge): // the launcher would refuse it: say so here
		return fmt.Errorf("result of replica %d: %w; send it as a string", replica, err)
	case err != nil && raw:
		return fmt.Errorf("result of replica %d: the json.RawMessage is not valid JSON", replica)
	case err != nil: // a MarshalJSON that wrote invalid UTF-8, nesting deeper than the launcher reads
		return fmt.Errorf("result of replica %d: %T encodes to JSON the launcher refuses: %w", replica, value, err)
	}
	return c.Send(Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: replica, Payload: payload})
}

// Fail sends err as the failure of replica: its Go type, its message and the stack of the caller.
func (c *Client) Fail(replica int, err error) error {
	if err == nil {
		return fmt.Errorf("fail replica %d: nil error", replica)
	}
	b, _ := json.Marshal(ErrorInfo{Type: fmt.Sprintf("%T", err), Message: err.Error(), Traceback: string(debug.Stack())})
	return c.Send(Frame{Kind: KindError, Encoding: EncodingJSON, Replica: replica, Payload: b})
}

// Send writes one frame. Outcome frames for a replica the worker does not own are refused with ErrForeignReplica.
func (c *Client) Send(f Frame) error {
	if f.Kind != KindHello && c.replicas != nil && !slices.Contains(c.replicas, f.Replica) {
		return fmt.Errorf("%s for replica %d: this worker owns %s (%s): %w",
			f.Kind, f.Replica, FormatReplicas(c.replicas), EnvReplicas, ErrForeignReplica)
	}
	if err := f.check(); err != nil {
		return err
	}
	hdr := AppendHeader(make([]byte, 0, HeaderSize), f.Kind, f.Encoding, f.Replica, len(f.Payload))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return fmt.Errorf("%s for replica %d not sent: %w", f.Kind, f.Replica, c.broken)
	}
	if n, err := writeFrame(c.w, hdr, f.Payload); err != nil {
		c.broken = fmt.Errorf("write %s for replica %d: %w after %d of its %d bytes: %w", f.Kind, f.Replica, err, n,
			HeaderSize+len(f.Payload), ErrBrokenChannel)
		return c.broken
	}
	return nil
}

// writeFrame writes header and payload with one write: writev(2) on a file (no copy of a large payload), else
// one Write of both joined. It returns the bytes written.
func writeFrame(w io.Writer, hdr, payload []byte) (int, error) {
	if f, ok := w.(*os.File); ok {
		if rc, err := f.SyscallConn(); err == nil {
			n, err := writev(rc, hdr, payload)
			if err != nil {
				err = &os.PathError{Op: "write", Path: f.Name(), Err: err}
			}
			return n, err
		}
	}
	return w.Write(append(append(make([]byte, 0, len(hdr)+len(payload)), hdr...), payload...))
}

// writev writes a and b to the descriptor behind rc as os.File.Write writes one buffer: it goes on after short
// writes and EINTR, and waits for room when a non-blocking descriptor is full.
func writev(rc syscall.RawConn, a, b []byte) (int, error) {
	bufs := [2][]byte{a, b}
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for len(bufs[0])+len(bufs[1]) > 0 {
			m, e := unix.Writev(int(fd), bufs[:])
			switch {
			case e == unix.EINTR:
				continue
			case e == unix.EAGAIN:
				return false
			case e != nil:
				werr = e
				return true
			case m == 0:
				werr = io.ErrShortWrite
				return true
			}
			n += m
			for i := range bufs {
				d := min(m, len(bufs[i]))
				bufs[i], m = bufs[i][d:], m-d
			}
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	return n, werr
}

// Close closes the channel when the writer is an io.Closer. The launcher sees the end of the stream when every
// copy of the descriptor is closed (at the latest when the worker exits).
func (c *Client) Close() error {
	if cl, ok := c.w.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// defaultClient is the process's channel for the package-level functions, opened on first use.
var defaultClient = sync.OnceValues(Open)

// Report sends value (as JSON) as the result of replica on the channel tpurun handed this process.
func Report(replica int, value any) error {
	c, err := defaultClient()
	if err != nil {
		return err
	}
	return c.Report(replica, value)
}

// Fail sends err as the failure of replica on the channel tpurun handed this process.
func Fail(replica int, err error) error {
	c, oerr := defaultClient()
	if oerr != nil {
		return oerr
	}
	return c.Fail(replica, err)
}
