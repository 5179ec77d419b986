package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxJSONDepth matches encoding/json's nesting limit, so ValidJSON and json.Valid agree.
const maxJSONDepth = 10000

// MaxJSONIntDigits is the longest integer, in decimal digits, that a JSON result may hold: Python's json refuses
// longer ones by default (int_max_str_digits, since 3.11), so a results document holding one could not be read by
// tpurun.spawn or any Python caller. Longer integers travel pickled (the Python client does so) or as strings.
const MaxJSONIntDigits = 4300

// Sentinels of CheckJSON.
var (
	ErrInvalidJSON = errors.New("not valid JSON in UTF-8")
	ErrHugeInteger = errors.New("integer too long for Python's json")
)

// HugeIntegerError is a JSON integer of more than MaxJSONIntDigits digits: where it starts and how long it is.
type HugeIntegerError struct {
	Offset int // byte offset of the number in the JSON text
	Digits int
}

func (e *HugeIntegerError) Error() string {
	return fmt.Sprintf("an integer of %d digits at byte %d, where Python's json reads at most %d", e.Digits, e.Offset,
		MaxJSONIntDigits)
}

// Unwrap makes errors.Is(err, ErrHugeInteger) true.
func (e *HugeIntegerError) Unwrap() error { return ErrHugeInteger }

// ValidJSON reports whether b is one valid JSON value (surrounding white space allowed) in valid UTF-8: what
// encoding/json's Valid accepts and utf8.Valid too (json.Valid lets invalid UTF-8 through, which Python's
// json.load then refuses), but several times faster on the long strings that big results are made of (it checks
// 8 bytes at a time inside strings).
func ValidJSON(b []byte) bool { return CheckJSON(b) != ErrInvalidJSON }

// CheckJSON is nil when b is valid JSON (ValidJSON) that Python's json reads back with its default limits: no
// integer longer than MaxJSONIntDigits. Otherwise it is ErrInvalidJSON or a *HugeIntegerError. The collector
// checks every JSON payload with it.
func CheckJSON(b []byte) error {
	s := &jsonScan{b: b, hugeAt: -1}
	i, ok := s.value(skipWS(b, 0), 0)
	switch {
	case !ok || skipWS(b, i) != len(b) || !utf8.Valid(b):
		return ErrInvalidJSON
	case s.hugeAt >= 0:
		return &HugeIntegerError{Offset: s.hugeAt, Digits: s.hugeDigits}
	}
	return nil
}

type jsonScan struct {
	b          []byte
	hugeAt     int // the first integer longer than MaxJSONIntDigits, or -1
	hugeDigits int
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

func (s *jsonScan) value(i, depth int) (int, bool) {
	b := s.b
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		return s.container(i, depth+1, '}')
	case c == '[':
		return s.container(i, depth+1, ']')
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// specialMask is non-zero when any byte of w is a quote, a backslash or a control character (< 0x20).
func specialMask(w uint64) uint64 {
	q := w ^ (ones * '"')
	s := w ^ (ones * '\\')
	return ((q-ones)&^q | (s-ones)&^s | (w-ones*0x20)&^w) & highs
}

// str scans the string that starts at the quote at i and returns the index after its closing quote. It skips
// 32, then 8 bytes at a time the bytes that can neither end it nor escape.
func (s *jsonScan) str(i int) (int, bool) {
	b := s.b
	i++ // opening quote
	for {
		for i+32 <= len(b) {
			w := b[i : i+32 : i+32]
			if specialMask(binary.LittleEndian.Uint64(w[0:]))|specialMask(binary.LittleEndian.Uint64(w[8:]))|
				specialMask(binary.LittleEndian.Uint64(w[16:]))|specialMask(binary.LittleEndian.Uint64(w[24:])) != 0 {
				break
			}
			i += 32
		}
		for i+8 <= len(b) && specialMask(binary.LittleEndian.Uint64(b[i:])) == 0 {
			i += 8
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			var ok bool
			if i, ok = escape(b, i+1); !ok {
				return i, false
			}
		default:
			i++
		}
	}
}

// escape checks the escape sequence whose backslash is at i-1 and returns the index after it.
func escape(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1, true
	case 'u':
		if len(b)-i < 5 || !hex4(b[i+1:i+5]) {
			return i, false
		}
		return i + 5, true
	}
	return i, false
}

// hex4 reports whether every byte of h is a hexadecimal digit.
func hex4(h []byte) bool {
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func (s *jsonScan) number(i int) (int, bool) {
	b, start := s.b, i
	if b[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, false
	}
	intEnd := i
	i, ok := fracExp(b, i)
	if ok && i == intEnd && intEnd-intStart > MaxJSONIntDigits && s.hugeAt < 0 {
		s.hugeAt, s.hugeDigits = start, intEnd-intStart // an integer: Python's json reads it with int(), which has the limit
	}
	return i, ok
}

// fracExp scans a number's optional fraction and exponent from i.
func fracExp(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

// container scans the array or object whose opening bracket is at i, up to its closing bracket end.
func (s *jsonScan) container(i, depth int, end byte) (int, bool) {
	b := s.b
	if depth > maxJSONDepth {
		return i, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1, true
	}
	for {
		var ok bool
		if end == '}' {
			if i, ok = s.key(i); !ok {
				return i, false
			}
		}
		if i, ok = s.value(i, depth); !ok {
			return i, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case end:
			return i + 1, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return i, false
		}
	}
}

// key scans an object member's key and colon from i and returns the index of its value.
func (s *jsonScan) key(i int) (int, bool) {
	b := s.b
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := s.str(i)
	if i = skipWS(b, i); !ok || i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipWS(b, i+1), true
}
