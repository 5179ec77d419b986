package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds the hosts one host list may expand to.
const MaxHosts = MaxNodes

// ParseHosts parses a comma-separated host list (TPU_WORKER_HOSTNAMES, the hosts option). Entries are trimmed;
// an empty entry is an error naming its position.
func ParseHosts(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("host list is empty: %w", ErrConfig)
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxHosts {
		return nil, fmt.Errorf("host list has %d entries, more than %d: %w", len(parts), MaxHosts, ErrConfig)
	}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := checkHost(p); err != nil {
			return nil, fmt.Errorf("host list %q, entry %d: %w", s, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func checkHost(h string) error {
	if why := hostProblem(h); why != "" {
		return fmt.Errorf("%s: %w", why, ErrConfig)
	}
	return nil
}

// hostProblem says what is wrong with a host name from a host list or a member, "" when nothing.
func hostProblem(h string) string {
	if h == "" {
		return "empty host name"
	}
	if len(h) > 253 {
		return fmt.Sprintf("host name of %d characters", len(h))
	}
	for _, r := range h {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(",[]/\\\"'", r) {
			return fmt.Sprintf("host name %q holds the character %q", h, r)
		}
	}
	return ""
}

// ParseSlurmNodelist expands a SLURM node list (SLURM_JOB_NODELIST) such as "tpu-[01-03,07],login1,rack[1-2]-n[1-2]"
// into host names in order. Zero padding of a range ("01-03") is kept.
func ParseSlurmNodelist(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("SLURM node list is empty: %w", ErrConfig)
	}
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("SLURM node list %q: nested '[' at byte %d: %w", s, i, ErrConfig)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("SLURM node list %q: unmatched ']' at byte %d: %w", s, i, ErrConfig)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("SLURM node list %q: unclosed '[': %w", s, ErrConfig)
		}
		hosts, err := expandHost(s[start:i], MaxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("SLURM node list %q: %w", s, err)
		}
		out = append(out, hosts...)
		start = i + 1
	}
	return out, nil
}

// expandHost expands one entry that may hold several bracket groups, at most limit hosts.
func expandHost(e string, limit int) ([]string, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return nil, fmt.Errorf("empty entry: %w", ErrConfig)
	}
	open := strings.IndexByte(e, '[')
	if open < 0 {
		if err := checkHost(e); err != nil {
			return nil, err
		}
		return []string{e}, nil
	}
	end := strings.IndexByte(e[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("entry %q: unclosed '[': %w", e, ErrConfig)
	}
	end += open
	prefix, body, suffix := e[:open], e[open+1:end], e[end+1:]
	if body == "" {
		return nil, fmt.Errorf("entry %q: empty range []: %w", e, ErrConfig)
	}
	var heads []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil || lo == "" || hi == "" {
			return nil, fmt.Errorf("entry %q: range %q is not N or N-M with decimal numbers: %w", e, part, ErrConfig)
		}
		if b < a {
			return nil, fmt.Errorf("entry %q: range %q runs backwards: %w", e, part, ErrConfig)
		}
		if b-a >= uint64(limit) || len(heads)+int(b-a+1) > limit {
			return nil, fmt.Errorf("entry %q: expands to more than %d hosts: %w", e, MaxHosts, ErrConfig)
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			heads = append(heads, fmt.Sprintf("%s%0*d", prefix, width, n))
		}
	}
	tails := []string{suffix}
	if strings.IndexByte(suffix, '[') >= 0 {
		var err error
		if tails, err = expandHost(suffix, max(limit/len(heads), 1)); err != nil {
			return nil, err
		}
	}
	if len(heads)*len(tails) > limit {
		return nil, fmt.Errorf("entry %q: expands to more than %d hosts: %w", e, MaxHosts, ErrConfig)
	}
	out := make([]string, 0, len(heads)*len(tails))
	for _, h := range heads {
		for _, t := range tails {
			if err := checkHost(h + t); err != nil {
				return nil, err
			}
			out = append(out, h+t)
		}
	}
	return out, nil
}

// Static is a node's place in a static world, and where it came from.
type Static struct {
	NodeRank int
	Hosts    []string // nil when the source gives only a rank (JOB_COMPLETION_INDEX)
	Source   string   // the env vars it came from
}

// StaticFromEnv reads the node rank and host list from the first source that is set: TPU_WORKER_ID +
// TPU_WORKER_HOSTNAMES, SLURM_NODEID + SLURM_JOB_NODELIST, or JOB_COMPLETION_INDEX. ok is false when none is.
func StaticFromEnv(getenv func(string) string) (st Static, ok bool, err error) {
	rank := func(name string, n int) (int, error) {
		v := strings.TrimSpace(getenv(name))
		r, err := strconv.Atoi(v)
		if err != nil || r < 0 || r >= MaxNodes {
			return 0, fmt.Errorf("%s=%q is not a node rank (0..%d): %w", name, getenv(name), MaxNodes-1, ErrConfig)
		}
		if n > 0 && r >= n {
			return 0, fmt.Errorf("%s=%d but the host list has only %d hosts: %w", name, r, n, ErrConfig)
		}
		return r, nil
	}
	if getenv("TPU_WORKER_HOSTNAMES") != "" || getenv("TPU_WORKER_ID") != "" {
		hosts, err := ParseHosts(getenv("TPU_WORKER_HOSTNAMES"))
		if err != nil {
			return st, true, fmt.Errorf("TPU_WORKER_HOSTNAMES: %w", err)
		}
		r, err := rank("TPU_WORKER_ID", len(hosts))
		if err != nil {
			return st, true, err
		}
		return Static{NodeRank: r, Hosts: hosts, Source: "TPU_WORKER_ID, TPU_WORKER_HOSTNAMES"}, true, nil
	}
	if getenv("SLURM_JOB_NODELIST") != "" || getenv("SLURM_NODEID") != "" {
		hosts, err := ParseSlurmNodelist(getenv("SLURM_JOB_NODELIST"))
		if err != nil {
			return st, true, fmt.Errorf("SLURM_JOB_NODELIST: %w", err)
		}
		r, err := rank("SLURM_NODEID", len(hosts))
		if err != nil {
			return st, true, err
		}
		return Static{NodeRank: r, Hosts: hosts, Source: "SLURM_NODEID, SLURM_JOB_NODELIST"}, true, nil
	}
	if getenv("JOB_COMPLETION_INDEX") != "" {
		r, err := rank("JOB_COMPLETION_INDEX", 0)
		if err != nil {
			return st, true, err
		}
		return Static{NodeRank: r, Source: "JOB_COMPLETION_INDEX"}, true, nil
	}
	return st, false, nil
}
