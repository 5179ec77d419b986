package worker

import (
	"encoding/binary"
	"fmt"
)

// Version is the protocol version this package writes and the only one it reads.
const Version = 1

// HeaderSize is the size in bytes of a frame header.
const HeaderSize = 16

// MaxPayload is the largest payload the wire format can express (the length field is 32 bits).
const MaxPayload = 1<<32 - 1

// DefaultMaxPayload is the payload limit a reader applies unless told otherwise (64 MiB).
const DefaultMaxPayload = 64 << 20

// Magic opens every frame header.
var Magic = [4]byte{'T', 'P', 'R', 'F'}

// Kind says what a frame carries.
type Kind uint8

// The frame kinds of version 1.
const (
	KindResult Kind = 1 // the value of one replica, in Encoding
	KindError  Kind = 2 // the failure of one replica: a JSON ErrorInfo
	KindHello  Kind = 3 // optional greeting: a JSON Hello; carries no outcome
)

func (k Kind) String() string { return enumName(kindNames[:], uint8(k), "kind") }

var kindNames = [...]string{KindResult: "result", KindError: "error", KindHello: "hello"}

// Encoding says how a payload is encoded.
type Encoding uint8

// The payload encodings of version 1.
const (
	EncodingJSON   Encoding = 1 // UTF-8 JSON text (one value)
	EncodingPickle Encoding = 2 // a Python pickle; opaque to Go, passed on base64-encoded
)

func (e Encoding) String() string { return enumName(encodingNames[:], uint8(e), "encoding") }

var encodingNames = [...]string{EncodingJSON: "json", EncodingPickle: "pickle"}

// enumName is names[v], or what(v) for a value without a name.
func enumName(names []string, v uint8, what string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", what, v)
}

// Frame is one message on the result channel.
type Frame struct {
	Kind     Kind
	Encoding Encoding
	Replica  int
	Payload  []byte
}

// ValidJSON is ValidJSON of the payload.
func (f Frame) ValidJSON() bool { return ValidJSON(f.Payload) }

// CheckJSON is CheckJSON of the payload.
func (f Frame) CheckJSON() error { return CheckJSON(f.Payload) }

// ErrorInfo is the payload of a KindError frame: a failure as the worker saw it.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// Hello is the payload of a KindHello frame.
type Hello struct {
	PID      int    `json:"pid"`
	Rank     int    `json:"rank"`
	Language string `json:"language,omitempty"`
}

// AppendHeader appends the header of a frame with a payload of n bytes to dst.
func AppendHeader(dst []byte, k Kind, enc Encoding, replica int, n int) []byte {
	dst = append(dst, Magic[:]...)
	dst = append(dst, Version, byte(k), byte(enc), 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(replica))
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// Encode returns the complete wire form of f.
func Encode(f Frame) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, HeaderSize+len(f.Payload))
	b = AppendHeader(b, f.Kind, f.Encoding, f.Replica, len(f.Payload))
	return append(b, f.Payload...), nil
}

func (f Frame) check() error {
	if f.Replica < 0 || f.Replica > 1<<31-1 {
		return fmt.Errorf("replica %d: must be between 0 and 2^31-1: %w", f.Replica, ErrMalformed)
	}
	if int64(len(f.Payload)) > MaxPayload {
		return fmt.Errorf("payload of %d bytes for replica %d: the wire format carries at most %d: %w",
			len(f.Payload), f.Replica, int64(MaxPayload), ErrTooLarge)
	}
	switch f.Kind {
	case KindResult:
		if f.Encoding != EncodingJSON && f.Encoding != EncodingPickle {
			return fmt.Errorf("result for replica %d has %s: use json or pickle: %w", f.Replica, f.Encoding, ErrMalformed)
		}
	case KindError, KindHello:
		if f.Encoding != EncodingJSON {
			return fmt.Errorf("%s frame for replica %d has %s: must be json: %w", f.Kind, f.Replica, f.Encoding, ErrMalformed)
		}
	default:
		return fmt.Errorf("%s for replica %d: %w", f.Kind, f.Replica, ErrMalformed)
	}
	return nil
}
