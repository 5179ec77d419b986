package worker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
	"unsafe"
)

// Sentinels of frame decoding; every error Decoder.Next returns (except io.EOF) is a *FrameError wrapping one.
var (
	ErrMalformed      = errors.New("malformed result frame")
	ErrTruncated      = errors.New("truncated result frame")
	ErrTooLarge       = errors.New("result frame over the size limit")
	ErrUnknownVersion = errors.New("unknown result protocol version")
)

// FrameError is a decoding failure with the facts: where in the stream, which frame, why. InSync reports whether
// the decoder skipped just this frame and can go on (true) or the stream is lost (false: every later Next fails).
type FrameError struct {
	Err     error // one of the sentinels above
	Offset  int64 // byte offset of the frame's header in the stream
	Kind    Kind
	Replica int   // -1 when the header was not readable
	Length  int64 // the payload length the header declared (-1 when not readable)
	Limit   int64 // the payload limit in force
	Version int   // the version byte read (for ErrUnknownVersion)
	Got     int64 // bytes of the frame received before the stream ended (for ErrTruncated)
	Detail  string
	InSync  bool
	Cause   error // the reader's error that ended the stream early, if any (e.g. os.ErrDeadlineExceeded)
}

func (e *FrameError) Error() string {
	s := fmt.Sprintf("%v at byte %d", e.Err, e.Offset)
	if e.Replica >= 0 {
		s += fmt.Sprintf(" (%s for replica %d)", e.Kind, e.Replica)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap exposes the sentinel and the reader's error to errors.Is/As.
func (e *FrameError) Unwrap() []error {
	if e.Cause != nil && e.Cause != io.ErrUnexpectedEOF {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// Decoder reads frames from a stream. It is not safe for concurrent use.
type Decoder struct {
	src   io.Reader
	size  int
	r     *bufio.Reader // made once the first header arrived: a stream that ends without a frame costs no buffer
	limit int64
	off   int64
	err   error // sticky: the stream is lost
	hdr   [HeaderSize]byte
}

// NewDecoder returns a decoder reading r with a buffer of bufSize bytes (a minimum of 4 KiB applies) that rejects
// payloads over limit bytes (limit <= 0 means DefaultMaxPayload). Payloads larger than the buffer are read
// straight into their own slice, so each payload byte is copied once: keep bufSize small (64 KiB). The buffer is
// made when the first header has arrived: a worker that reports nothing costs none.
func NewDecoder(r io.Reader, limit int64, bufSize int) *Decoder {
	if limit <= 0 {
		limit = DefaultMaxPayload
	}
	return &Decoder{src: r, size: max(bufSize, 4096), limit: limit}
}

// header reads the next frame header into d.hdr: the first straight from the stream, the others through the buffer.
func (d *Decoder) header() (int, error) {
	if d.r != nil {
		return io.ReadFull(d.r, d.hdr[:])
	}
	n, err := io.ReadFull(d.src, d.hdr[:])
	if n > 0 {
		d.r = bufio.NewReaderSize(d.src, d.size)
	}
	return n, err
}

// Offset returns the number of bytes consumed so far.
func (d *Decoder) Offset() int64 { return d.off }

// Next returns the next frame, io.EOF at a clean end of stream, a *FrameError, or (when the reader fails at a
// frame boundary) the reader's error, wrapped. After an error that is not a *FrameError with InSync true, Next
// keeps returning that error; call Drain to consume the rest of the stream.
func (d *Decoder) Next() (Frame, error) {
	if d.err != nil {
		return Frame{}, d.err
	}
	start := d.off
	n, err := d.header()
	d.off += int64(n)
	if err == io.EOF {
		return Frame{}, io.EOF
	}
	if err != nil && n == 0 {
		// Not a frame problem: the reader failed at a frame boundary (closed, deadline exceeded, ...).
		d.err = fmt.Errorf("read the result channel at byte %d: %w", start, err)
		return Frame{}, d.err
	}
	if err != nil {
		return Frame{}, d.fail(&FrameError{Err: ErrTruncated, Offset: start, Replica: -1, Length: -1, Limit: d.limit,
			Got: int64(n), Cause: err, Detail: fmt.Sprintf("the stream ended after %d of the %d header bytes (%v)", n, HeaderSize, err)})
	}
	h := d.hdr[:]
	if [4]byte(h[0:4]) != Magic {
		return Frame{}, d.fail(&FrameError{Err: ErrMalformed, Offset: start, Replica: -1, Length: -1, Limit: d.limit,
			Detail: fmt.Sprintf("bad magic %q (want %q): this is not a tpurun frame", h[0:4], Magic[:])})
	}
	if h[4] != Version {
		return Frame{}, d.fail(&FrameError{Err: ErrUnknownVersion, Offset: start, Replica: -1, Length: -1, Limit: d.limit,
			Version: int(h[4]), Detail: fmt.Sprintf("version %d, this tpurun reads version %d", h[4], Version)})
	}
	f := Frame{Kind: Kind(h[5]), Encoding: Encoding(h[6])}
	rep := binary.BigEndian.Uint32(h[8:12])
	length := int64(binary.BigEndian.Uint32(h[12:16]))
	fe := &FrameError{Offset: start, Kind: f.Kind, Replica: int(rep), Length: length, Limit: d.limit, InSync: true}
	if rep > 1<<31-1 {
		fe.Replica = -1
	}
	if length > d.limit {
		fe.Err, fe.Detail = ErrTooLarge, fmt.Sprintf("payload of %d bytes, the limit is %d", length, d.limit)
		return Frame{}, d.skip(fe)
	}
	f.Replica = int(rep)
	n, err = d.readPayload(&f, int(length))
	d.off += int64(n)
	if err != nil {
		fe.Err, fe.InSync, fe.Got, fe.Cause = ErrTruncated, false, int64(HeaderSize+n), err
		fe.Detail = fmt.Sprintf("the stream ended after %d of the %d payload bytes (%v)", n, length, err)
		return Frame{}, d.fail(fe)
	}
	switch {
	case h[7] != 0:
		fe.Err, fe.Detail = ErrMalformed, fmt.Sprintf("reserved byte is %d, must be 0", h[7])
	case fe.Replica < 0:
		fe.Err, fe.Detail = ErrMalformed, fmt.Sprintf("replica %d is over 2^31-1", rep)
	default:
		if err := f.check(); err != nil {
			fe.Err, fe.Detail = ErrMalformed, err.Error()
		}
	}
	if fe.Err != nil {
		return Frame{}, fe
	}
	return f, nil
}

// readPayload reads the length payload bytes of f into f.Payload and returns how many arrived. A payload larger
// than the read buffer gets its memory only once a full buffer of it has arrived (a Peek, which allocates
// nothing), so a header that declares 64 MiB and then stops costs nothing more. The slice is then allocated whole
// (growing it with what arrives fragments the heap: a third of the throughput of large results) and, after what
// the buffer holds, filled straight from the stream (bufio reads a request larger than its buffer into it).
func (d *Decoder) readPayload(f *Frame, length int) (int, error) {
	if length > d.r.Size() {
		if _, err := d.r.Peek(d.r.Size()); err != nil {
			n, _ := d.r.Discard(d.r.Buffered())
			return n, err
		}
	}
	p := payloadSlice(d.off, length)
	n, err := io.ReadFull(d.r, p)
	if err == nil {
		f.Payload = p
	}
	return n, err
}

// hugeFrom is the payload size from which the payload's memory is asked to be backed by transparent huge pages
// (madvise MADV_HUGEPAGE, where the kernel leaves it to the program): filling a 32 MiB payload otherwise takes 8192
// page faults, which cost more than the copy itself (half of the launcher's time for 8 x 32 MiB of results).
const hugeFrom = 4 << 20

// payloadSlice allocates a payload of length bytes, starting at the same offset within a cache line as it lies in
// the stream (off), so that when the stream is a pipe written one frame per write (both shipped clients) the kernel
// copies it out cache-line aligned: about 3% of the throughput of large results.
func payloadSlice(off int64, length int) []byte {
	pad := int(off % 64)
	b := make([]byte, pad+length)
	if length >= hugeFrom {
		adviseHuge(b)
	}
	return b[pad : pad+length : pad+length]
}

// adviseHuge asks for the 2 MiB-aligned part of b to be backed by huge pages; it is only advice (an error changes
// nothing: a kernel without transparent huge pages, or with them disabled, faults 4 KiB pages in as before).
func adviseHuge(b []byte) {
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(len(b))) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], syscall.MADV_HUGEPAGE)
}

func (d *Decoder) fail(fe *FrameError) error {
	fe.InSync = false
	d.err = fe
	return fe
}

// skip discards the payload of a frame that is rejected whole, keeping the stream in sync.
func (d *Decoder) skip(fe *FrameError) error {
	n, err := io.CopyN(io.Discard, d.r, fe.Length)
	d.off += n
	if err != nil {
		fe.Got = HeaderSize + n
		fe.Detail += fmt.Sprintf("; and the stream ended after %d of its %d payload bytes", n, fe.Length)
		return d.fail(fe)
	}
	return fe
}

// Drain reads and discards the rest of the stream, so that a writer is never left blocked on a full pipe.
func (d *Decoder) Drain() (int64, error) {
	var r io.Reader = d.src
	if d.r != nil {
		r = d.r
	}
	n, err := io.Copy(io.Discard, r)
	d.off += n
	return n, err
}
