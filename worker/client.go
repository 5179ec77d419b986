package worker

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrForeignReplica means a worker tried to report a replica it does not own.
var ErrForeignReplica = fmt.Errorf("replica not owned by this worker")

// Client writes frames to a result channel. It is safe for concurrent use; each frame is written whole under a
// lock, so frames from several goroutines never interleave.
type Client struct {
	mu       sync.Mutex
	w        io.Writer
	replicas []int
}

// NewClient returns a client writing to w for a worker that owns replicas (nil: any replica may be reported).
func NewClient(w io.Writer, replicas []int) *Client {
	return &Client{w: w, replicas: slices.Clone(replicas)}
}

// Open returns the client of the channel the launcher handed this process (TPURUN_RESULT_FD, TPURUN_REPLICAS).
// It marks the descriptor close-on-exec first, so programs this worker starts never inherit the channel.
func Open() (*Client, error) {
	v := os.Getenv(EnvResultFD)
	if v == "" {
		return nil, &EnvError{Var: EnvResultFD, Err: ErrNoChannel}
	}
	fd, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || fd < 0 {
		return nil, &EnvError{Var: EnvResultFD, Value: v, Err: ErrBadEnv, Detail: "not a file descriptor number"}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &EnvError{Var: EnvResultFD, Value: v, Err: ErrBadEnv,
			Detail: fmt.Sprintf("descriptor %d is not open in this process (%v); it must be inherited from tpurun", fd, err)}
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

// Report sends value, encoded as JSON, as the result of replica. A json.RawMessage is sent as is.
func (c *Client) Report(replica int, value any) error {
	var payload []byte
	if raw, ok := value.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return fmt.Errorf("result of replica %d: the json.RawMessage is not valid JSON", replica)
		}
		payload = raw
	} else {
		b, err := json.Marshal(value)
		if err != nil {
			return fmt.Errorf("result of replica %d: encode %T as JSON: %w", replica, value, err)
		}
		payload = b
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
	if _, err := c.w.Write(hdr); err != nil {
		return fmt.Errorf("write %s header for replica %d: %w", f.Kind, f.Replica, err)
	}
	if _, err := c.w.Write(f.Payload); err != nil {
		return fmt.Errorf("write %s payload (%d bytes) for replica %d: %w", f.Kind, len(f.Payload), f.Replica, err)
	}
	return nil
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
