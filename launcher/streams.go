package launcher

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Std selects standard streams, with torchrun's numbers: 0 none, 1 stdout, 2 stderr, 3 both.
type Std int

// The values of Std.
const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdAll  Std = 3
)

// StdSpec is a --redirects or --tee value: one Std for every local rank, or a per-local-rank map
// ("0:1,1:2"; ranks not listed get StdNone).
type StdSpec struct {
	All     Std
	PerRank map[int]Std
}

// For returns the streams selected for localRank.
func (s StdSpec) For(localRank int) Std {
	if s.PerRank != nil {
		return s.PerRank[localRank]
	}
	return s.All
}

// Any reports whether some rank selects some stream.
func (s StdSpec) Any() bool {
	if s.PerRank != nil {
		for _, v := range s.PerRank {
			if v != StdNone {
				return true
			}
		}
		return false
	}
	return s.All != StdNone
}

// ParseStdSpec parses torchrun's --redirects/--tee syntax: "3", or "0:1,1:2" (local_rank:std). flag names the
// flag in errors.
func ParseStdSpec(flag, s string) (StdSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return StdSpec{}, nil
	}
	if !strings.Contains(s, ":") {
		v, err := parseStd(flag, s, s)
		return StdSpec{All: v}, err
	}
	spec := StdSpec{PerRank: map[int]Std{}}
	for _, part := range strings.Split(s, ",") {
		r, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return StdSpec{}, &ConfigError{Field: flag, Value: s,
				Hint: fmt.Sprintf("entry %q is not local_rank:std; write e.g. 0:1,1:3", part)}
		}
		rank, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || rank < 0 {
			return StdSpec{}, &ConfigError{Field: flag, Value: s,
				Hint: fmt.Sprintf("local rank %q in %q is not a non-negative integer", r, part)}
		}
		if _, dup := spec.PerRank[rank]; dup {
			return StdSpec{}, &ConfigError{Field: flag, Value: s, Hint: fmt.Sprintf("local rank %d is listed twice", rank)}
		}
		std, err := parseStd(flag, s, v)
		if err != nil {
			return StdSpec{}, err
		}
		spec.PerRank[rank] = std
	}
	return spec, nil
}

func parseStd(flag, whole, v string) (Std, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 3 {
		return 0, &ConfigError{Field: flag, Value: whole,
			Hint: fmt.Sprintf("%q is not a stream selector; use 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", v)}
	}
	return Std(n), nil
}

// ParseRanks parses a --local-ranks-filter value: comma-separated non-negative integers, ranges "a-b" allowed.
// The empty string means no filter (nil).
func ParseRanks(flag, s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, &ConfigError{Field: flag, Value: s,
				Hint: fmt.Sprintf("%q is not a rank or range; write e.g. 0,2,4-7", part)}
		}
		if b-a > 1<<16 {
			return nil, &ConfigError{Field: flag, Value: s, Hint: fmt.Sprintf("range %q is too large", part)}
		}
		for i := a; i <= b; i++ {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Ints(out)
	return out, nil
}
