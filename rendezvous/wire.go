package rendezvous

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Version is the wire protocol version carried in every message.
const Version = 1

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
	msgPing     = "ping"
	msgReply    = "reply"
	msgPong     = "pong"
	msgFailure  = "failure"
	msgRejected = "rejected"
)

// message is one frame of the protocol (see doc.go).
type message struct {
	V          int               `json:"v"`
	Type       string            `json:"type"`
	ID         uint64            `json:"id,omitempty"`
	Token      string            `json:"token,omitempty"`
	Member     *Member           `json:"member,omitempty"`
	NNodes     int               `json:"nnodes,omitempty"`
	Hosts      []string          `json:"hosts,omitempty"`
	TimeoutMS  int64             `json:"timeout_ms,omitempty"`
	Name       string            `json:"name,omitempty"`
	Data       []byte            `json:"data,omitempty"`
	Gathered   map[int][]byte    `json:"gathered,omitempty"`
	Assignment *Assignment       `json:"assignment,omitempty"`
	Failure    *Failure          `json:"failure,omitempty"`
	Error      *wireError        `json:"error,omitempty"`
	Extra      map[string]string `json:"extra,omitempty"`
}

var knownTypes = map[string]bool{
	msgJoin: true, msgBarrier: true, msgPublish: true, msgGather: true, msgFail: true, msgLeave: true,
	msgPing: true, msgReply: true, msgPong: true, msgFailure: true, msgRejected: true,
}

// writeMessage frames m: a 4-byte big-endian body length, then the JSON body.
func writeMessage(w io.Writer, m *message, max int) error {
	m.V = Version
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("rendezvous: encode %s message: %w", m.Type, err)
	}
	if len(body) > max {
		return newError(ErrProtocol, fmt.Sprintf("%s message of %d bytes exceeds the limit of %d bytes", m.Type, len(body), max))
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// readMessage reads one frame; it refuses a body longer than max before allocating it. io.EOF is returned as is
// when the stream ends cleanly between frames.
func readMessage(r io.Reader, max int) (*message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, newError(ErrProtocol, fmt.Sprintf("message of %d bytes exceeds the limit of %d bytes", n, max))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return decodeMessage(body)
}

// decodeMessage parses and checks one frame body.
func decodeMessage(body []byte) (*message, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m message
	if err := dec.Decode(&m); err != nil {
		return nil, newError(ErrProtocol, fmt.Sprintf("malformed message (%d bytes): %v", len(body), err))
	}
	if dec.More() {
		return nil, newError(ErrProtocol, "trailing data after the message")
	}
	if m.V != Version {
		return nil, newError(ErrProtocol, fmt.Sprintf("message version %d; this build speaks version %d (run the same tpurun on every node)", m.V, Version))
	}
	if !knownTypes[m.Type] {
		return nil, newError(ErrProtocol, fmt.Sprintf("unknown message type %q", m.Type))
	}
	if m.Type == msgJoin {
		if m.Member == nil {
			return nil, newError(ErrProtocol, "join message without a member")
		}
		if err := m.Member.validate(); err != nil {
			return nil, err
		}
		if m.NNodes < 1 || m.NNodes > MaxNodes {
			return nil, newError(ErrProtocol, fmt.Sprintf("join message with nnodes %d; need 1..%d", m.NNodes, MaxNodes))
		}
		if m.Member.Rank >= m.NNodes {
			return nil, newError(ErrConfig, fmt.Sprintf("host %q requests node rank %d but nnodes is %d", m.Member.Host, m.Member.Rank, m.NNodes))
		}
	}
	if m.TimeoutMS < 0 {
		return nil, newError(ErrProtocol, fmt.Sprintf("negative timeout %d ms", m.TimeoutMS))
	}
	return &m, nil
}

// MaxNodes bounds the node count of one world.
const MaxNodes = 65536
