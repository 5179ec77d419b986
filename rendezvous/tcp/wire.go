package tcp

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"tpurun/rendezvous/internal/agree"

	"tpurun/rendezvous"
)

// Version is the wire protocol version: the handshake's (clientHandshake) and every message's. Version 1 had no
// handshake and carried the token in every message; version 2 had no finish message, no job_closed error and no
// mismatch values; version 3 sent every node the whole world (every node's name and address) in its assignment;
// version 4 sent the whole host list in every join (version 5 its sum); version 5 sent a slice's hosts as an array
// of objects in each share (version 6 sends the slice's table beside it: agree.SliceTable).
const Version = 6

// DefaultMaxMessage bounds one message (frame body) in bytes.
const DefaultMaxMessage = 4 << 20

// Message types.
const (
	msgJoin     = "join"
	msgBarrier  = "barrier"
	msgPublish  = "publish"
	msgGather   = "gather"
	msgFail     = "fail"
	msgLeave    = "leave"
	msgWaiting  = "waiting"
	msgFinish   = "finish"
	msgPing     = "ping"
	msgReply    = "reply"
	msgPong     = "pong"
	msgFailure  = "failure"
	msgRejected = "rejected"
)

// message is one frame of the protocol (described in the rendezvous package's doc).
type message struct {
	V          int                    `json:"v"`
	Type       string                 `json:"type"`
	ID         uint64                 `json:"id,omitempty"`
	Member     *rendezvous.Member     `json:"member,omitempty"`
	NNodes     int                    `json:"nnodes,omitempty"`
	MinNodes   int                    `json:"min_nodes,omitempty"`
	LastCallMS int64                  `json:"last_call_ms,omitempty"`
	HostsSum   string                 `json:"hosts_sum,omitempty"`
	TimeoutMS  int64                  `json:"timeout_ms,omitempty"`
	Name       string                 `json:"name,omitempty"`
	Data       []byte                 `json:"data,omitempty"`
	Gathered   map[int][]byte         `json:"gathered,omitempty"`
	Waiting    int                    `json:"waiting,omitempty"`
	ExitCode   int                    `json:"exit_code,omitempty"`
	LateMS     int64                  `json:"late_ms,omitempty"` // ping: how late the node sends it (its own lag)
	Assignment *rendezvous.Assignment `json:"assignment,omitempty"`
	Table      *agree.SliceTable      `json:"-"` // beside a share whose slice it names: the frame's attachment
	Failure    *rendezvous.Failure    `json:"failure,omitempty"`
	Error      *agree.WireError       `json:"error,omitempty"`
	Extra      map[string]string      `json:"extra,omitempty"`
}

var knownTypes = map[string]bool{
	msgJoin: true, msgBarrier: true, msgPublish: true, msgGather: true, msgFail: true, msgLeave: true, msgWaiting: true, msgFinish: true,
	msgPing: true, msgReply: true, msgPong: true, msgFailure: true, msgRejected: true,
}

// writeMessage frames m: a 4-byte big-endian body length, then the JSON body.
func writeMessage(w io.Writer, m *message, max int) error {
	f, err := encodeFrame(m, max)
	if err != nil {
		return err
	}
	_, err = w.Write(f)
	return err
}

// encodeFrame is m framed, with this version: ready to be written to one connection or to many.
func encodeFrame(m *message, max int) ([]byte, error) {
	m.V = Version
	return appendFrame(m, max)
}

// writeFrame frames m as it is (writeMessage sets the version).
func writeFrame(w io.Writer, m *message, max int) error {
	f, err := appendFrame(m, max)
	if err != nil {
		return err
	}
	_, err = w.Write(f)
	return err
}

func appendFrame(m *message, max int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, 4))
	if err := json.NewEncoder(&buf).Encode(m); err != nil {
		return nil, fmt.Errorf("rendezvous: encode %s message: %w", m.Type, err)
	}
	f := bytes.TrimSuffix(buf.Bytes(), []byte("\n")) // the encoder ends a value with a newline
	if len(f)-4 > max {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("%s message of %d bytes exceeds the limit of %d bytes", m.Type, len(f)-4, max))
	}
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f, nil
}

// frameHeader is the length header of a frame whose body is n bytes (written before the body's parts).
func frameHeader(n int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(n))
}

// attached is the flag of a frame header (its high bit) whose body is a JSON message with an attachment: the
// message's length (4 bytes, big-endian), the message, then the attachment, raw bytes read without decoding (a
// slice's table beside a share: agree.SliceTable's binary form).
const attached = 1 << 31

// attachedHeader opens a frame of a message of msgLen bytes and an attachment of n bytes: the frame header and
// the message's length.
func attachedHeader(msgLen, n int) []byte {
	h := binary.BigEndian.AppendUint32(nil, uint32(4+msgLen+n)|attached)
	return binary.BigEndian.AppendUint32(h, uint32(msgLen))
}

// replyHead opens a reply to request id whose field follows: `{"v":5,"type":"reply","id":7,"field":`. The value
// and closeBrace complete it (the server's replies made of parts encoded once: a share, gathered data).
func replyHead(id uint64, field string) []byte {
	b := fmt.Appendf(nil, `{"v":%d,"type":%q,`, Version, msgReply)
	if id != 0 {
		b = fmt.Appendf(b, `"id":%d,`, id)
	}
	return fmt.Appendf(b, `%q:`, field)
}

var closeBrace = []byte("}")

// pongFrame answers every ping: encoded once, when a server first answers one.
var pongFrame = sync.OnceValue(func() []byte {
	f, err := encodeFrame(&message{Type: msgPong}, DefaultMaxMessage)
	if err != nil {
		panic(err)
	}
	return f
})

// readMessage reads one frame; it refuses a body longer than max before reading it, and allocates the body as it
// arrives, not as announced, so a peer announcing a large frame and sending little costs little. io.EOF is
// returned as is when the stream ends cleanly between frames.
func readMessage(r io.Reader, max int) (*message, error) {
	return newFrameReader(r, max).next()
}

// firstChunk is the most readBody allocates before any byte of a body has arrived.
const firstChunk = 64 << 10

// readBody reads exactly n bytes, growing its buffer (doubling) only as the bytes arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, min(n, firstChunk))
	_, err := io.ReadFull(r, buf)
	for err == nil && len(buf) < n {
		have := len(buf)
		buf = slices.Grow(buf, min(n-have, have))[:have+min(n-have, have)]
		_, err = io.ReadFull(r, buf[have:])
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	return buf, nil
}

// decodeMessage parses and checks one frame body.
func decodeMessage(body []byte) (*message, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m message
	if err := dec.Decode(&m); err != nil {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("malformed message (%d bytes): %v", len(body), err))
	}
	if dec.More() {
		return nil, agree.NewError(rendezvous.ErrProtocol, "trailing data after the message")
	}
	if m.V != Version {
		return nil, agree.NewError(rendezvous.ErrVersion, fmt.Sprintf("message version %d; this build speaks version %d (run the same tpurun on every node)", m.V, Version))
	}
	if !knownTypes[m.Type] {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("unknown message type %q", m.Type))
	}
	if m.Type == msgJoin {
		if err := checkJoin(&m); err != nil {
			return nil, err
		}
	}
	if m.TimeoutMS < 0 || m.LateMS < 0 {
		return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("negative timeout %d ms or lateness %d ms", m.TimeoutMS, m.LateMS))
	}
	return &m, nil
}

// checkJoin checks what a join message carries: a valid member, a world size, and a node rank within it.
func checkJoin(m *message) error {
	if m.Member == nil {
		return agree.NewError(rendezvous.ErrProtocol, "join message without a member")
	}
	if err := m.Member.Validate(); err != nil {
		return err
	}
	if m.NNodes < 1 || m.NNodes > rendezvous.MaxNodes {
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("join message with nnodes %d; need 1..%d", m.NNodes, rendezvous.MaxNodes))
	}
	if m.MinNodes < 0 || m.MinNodes > m.NNodes {
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("join message with min_nodes %d of %d", m.MinNodes, m.NNodes))
	}
	if limit := cmp.Or(m.MinNodes, m.NNodes); m.Member.Rank >= limit {
		return agree.NewError(rendezvous.ErrConfig, fmt.Sprintf("host %q requests node rank %d of a world of %s nodes", m.Member.Host, m.Member.Rank, agree.SizeRange(m.MinNodes, m.NNodes)))
	}
	if m.LastCallMS < 0 {
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("negative last call %d ms", m.LastCallMS))
	}
	return nil
}
