package topology

import (
	"fmt"
	"strconv"
	"strings"
	"tpurun/internal/hostname"
)

// ParseSlurmNodelist expands a SLURM node list (SLURM_JOB_NODELIST) such as "tpu-[01-03,07],login1,rack[1-2]-n[1-2]"
// into host names in order. Zero padding of a range ("01-03") is kept. Host names follow ParseHostList's rules.
func ParseSlurmNodelist(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, parseErrorf("SLURM node list is empty")
	}
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		c := byte(',') // the end of the list ends its last entry
		if i < len(s) {
			c = s[i]
		}
		switch {
		case c == '[':
			if depth++; depth > 1 {
				return nil, parseErrorf("SLURM node list %q: nested '[' at byte %d", s, i)
			}
		case c == ']':
			if depth--; depth < 0 {
				return nil, parseErrorf("SLURM node list %q: unmatched ']' at byte %d", s, i)
			}
		case c == ',' && depth == 0:
			hosts, err := expandHost(s[start:i], maxCount-len(out))
			if err != nil {
				return nil, parseErrorf("SLURM node list %q: %v", s, err)
			}
			out = append(out, hosts...)
			start = i + 1
		}
	}
	if depth != 0 {
		return nil, parseErrorf("SLURM node list %q: unclosed '['", s)
	}
	seen := make(map[string]bool, len(out))
	for _, h := range out {
		if seen[h] {
			return nil, parseErrorf("SLURM node list %q names %q twice", s, h)
		}
		seen[h] = true
	}
	return out, nil
}

// expandHost expands one entry that may hold several bracket groups, at most limit hosts.
func expandHost(e string, limit int) ([]string, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return nil, parseErrorf("empty entry")
	}
	open := strings.IndexByte(e, '[')
	if open < 0 {
		if err := hostname.Check(e); err != nil {
			return nil, parseErrorf("%v", err)
		}
		return []string{e}, nil
	}
	end := strings.IndexByte(e[open:], ']')
	if end < 0 {
		return nil, parseErrorf("entry %q: unclosed '['", e)
	}
	end += open
	prefix, body, suffix := e[:open], e[open+1:end], e[end+1:]
	if body == "" {
		return nil, parseErrorf("entry %q: empty range []", e)
	}
	heads, err := expandRanges(e, prefix, body, limit)
	if err != nil {
		return nil, err
	}
	tails := []string{suffix}
	if strings.IndexByte(suffix, '[') >= 0 {
		if tails, err = expandHost(suffix, max(limit/len(heads), 1)); err != nil {
			return nil, err
		}
	}
	if len(heads)*len(tails) > limit {
		return nil, parseErrorf("entry %q: expands to more than %d hosts", e, maxCount)
	}
	return joinHosts(heads, tails)
}

// expandRanges expands the ranges of one bracket group of entry e ("01-03,07") after prefix, at most limit hosts.
func expandRanges(e, prefix, body string, limit int) ([]string, error) {
	var heads []string
	for _, part := range strings.Split(body, ",") {
		a, b, width, err := parseRange(e, part)
		if err != nil {
			return nil, err
		}
		if b-a >= uint64(limit) || len(heads)+int(b-a+1) > limit {
			return nil, parseErrorf("entry %q: expands to more than %d hosts", e, maxCount)
		}
		for n := a; n <= b; n++ {
			heads = append(heads, fmt.Sprintf("%s%0*d", prefix, width, n))
		}
	}
	return heads, nil
}

// parseRange parses one range of entry e: N or N-M, decimal, not backwards; width is N's zero-padded width (0 when
// not padded).
func parseRange(e, part string) (lo, hi uint64, width int, err error) {
	l, h, isRange := strings.Cut(part, "-")
	if !isRange {
		h = l
	}
	lo, err1 := strconv.ParseUint(l, 10, 32)
	hi, err2 := strconv.ParseUint(h, 10, 32)
	if err1 != nil || err2 != nil || l == "" || h == "" {
		return 0, 0, 0, parseErrorf("entry %q: range %q is not N or N-M with decimal numbers", e, part)
	}
	if hi < lo {
		return 0, 0, 0, parseErrorf("entry %q: range %q runs backwards", e, part)
	}
	if len(l) > 1 && l[0] == '0' {
		width = len(l)
	}
	return lo, hi, width, nil
}

// joinHosts is every head followed by every tail, each a valid host name.
func joinHosts(heads, tails []string) ([]string, error) {
	out := make([]string, 0, len(heads)*len(tails))
	for _, h := range heads {
		for _, t := range tails {
			if err := hostname.Check(h + t); err != nil {
				return nil, parseErrorf("%v", err)
			}
			out = append(out, h+t)
		}
	}
	return out, nil
}
