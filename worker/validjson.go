package worker

import (
	"encoding/binary"
	"unicode/utf8"
)

// maxJSONDepth matches encoding/json's nesting limit, so ValidJSON and json.Valid agree.
const maxJSONDepth = 10000

// ValidJSON reports whether b is one valid JSON value (surrounding white space allowed) in valid UTF-8: what
// encoding/json's Valid accepts and utf8.Valid too (json.Valid lets invalid UTF-8 through, which Python's
// json.load then refuses), but several times faster on the long strings that big results are made of (it checks
// 8 bytes at a time inside strings). The collector validates every JSON payload with it.
func ValidJSON(b []byte) bool { return validJSON(b, nil, 0) }

// validJSON validates b; clean, when not nil, has bit k set when block k (bytes k<<shift up to (k+1)<<shift) holds
// no quote, backslash or control byte, so string scanning can jump over it without reading it again.
func validJSON(b []byte, clean []uint64, shift uint) bool {
	s := &jsonScan{b: b, clean: clean, shift: shift}
	i, ok := s.value(skipWS(b, 0), 0)
	return ok && skipWS(b, i) == len(b) && utf8.Valid(b)
}

type jsonScan struct {
	b     []byte
	clean []uint64
	shift uint
}

// cleanBlocks returns the bitmap validJSON takes for b: bit k set when block k of 1<<shift bytes is free of
// quotes, backslashes and control bytes. Only whole blocks count; the decoder computes it chunk by chunk while
// the bytes are still in cache.
func cleanBlocks(dst []uint64, b []byte, from int, shift uint) []uint64 { // shift >= 3
	size := 1 << shift
	need := (len(b)>>shift + 63) / 64
	for len(dst) < need {
		dst = append(dst, 0)
	}
	for k := from >> shift; (k+1)<<shift <= len(b); k++ {
		blk := b[k<<shift : (k+1)<<shift]
		var m uint64
		j := 0
		for ; j+32 <= size; j += 32 {
			w := blk[j : j+32 : j+32]
			m |= specialMask(binary.LittleEndian.Uint64(w[0:])) | specialMask(binary.LittleEndian.Uint64(w[8:])) |
				specialMask(binary.LittleEndian.Uint64(w[16:])) | specialMask(binary.LittleEndian.Uint64(w[24:]))
		}
		for ; j+8 <= size; j += 8 {
			m |= specialMask(binary.LittleEndian.Uint64(blk[j:]))
		}
		if m == 0 {
			dst[k/64] |= 1 << (k % 64)
		}
	}
	return dst
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
		return s.object(i, depth+1)
	case c == '[':
		return s.array(i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return number(b, i)
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

func (s *jsonScan) str(i int) (int, bool) {
	b := s.b
	i++ // opening quote
	for {
		end := len(b)
		if s.clean != nil {
			for k := i >> s.shift; k/64 < len(s.clean) && s.clean[k/64]&(1<<(k%64)) != 0; k = i >> s.shift {
				i = (k + 1) << s.shift
			}
			end = min(len(b), (i>>s.shift+1)<<s.shift) // scan to the end of this block, then look again
		}
		for i+32 <= end {
			w := b[i : i+32 : i+32]
			if specialMask(binary.LittleEndian.Uint64(w[0:]))|specialMask(binary.LittleEndian.Uint64(w[8:]))|
				specialMask(binary.LittleEndian.Uint64(w[16:]))|specialMask(binary.LittleEndian.Uint64(w[24:])) != 0 {
				break
			}
			i += 32
		}
		for i+8 <= end && specialMask(binary.LittleEndian.Uint64(b[i:])) == 0 {
			i += 8
		}
		if i >= len(b) {
			return i, false
		}
		if i >= end {
			continue
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return i, false
					}
				}
				i += 5
			default:
				return i, false
			}
		default:
			i++
		}
	}
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func number(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, false
	}
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

func (s *jsonScan) array(i, depth int) (int, bool) {
	b := s.b
	if depth > maxJSONDepth {
		return i, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = s.value(i, depth); !ok {
			return i, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return i, false
		}
	}
}

func (s *jsonScan) object(i, depth int) (int, bool) {
	b := s.b
	if depth > maxJSONDepth {
		return i, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = s.str(i); !ok {
			return i, false
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		if i, ok = s.value(skipWS(b, i+1), depth); !ok {
			return i, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return i, false
		}
	}
}
