package topology

import (
	"strconv"
	"strings"

	"tpurun/internal/hostname"
)

// maxCount bounds counts (chips, processes, worker ids) taken from outside input.
const maxCount = 1 << 16

// ParseCount parses a positive whole number such as TPU_NUM_DEVICES=4: digits only, no sign, at most 65536.
func ParseCount(s string) (int, error) { return parseWhole(s, 1, "positive") }

// ParseIndex parses a non-negative whole number such as TPU_WORKER_ID=1, below 65536.
func ParseIndex(s string) (int, error) { return parseWhole(s, 0, "non-negative") }

// parseWhole parses digits as a number from lo to lo+maxCount-1.
func parseWhole(s string, lo int, what string) (int, error) {
	t := strings.TrimSpace(s)
	if !isDigits(t) {
		return 0, parseErrorf("%q is not a %s whole number", s, what)
	}
	n, err := strconv.Atoi(t)
	if hi := lo + maxCount - 1; err != nil || n < lo || n > hi {
		return 0, parseErrorf("%q is not a whole number between %d and %d", s, lo, hi)
	}
	return n, nil
}

// ParseChipList parses a chip list such as TPU_VISIBLE_CHIPS=0,1,2,3: distinct indices, in the order given.
func ParseChipList(s string) ([]int, error) {
	return parseList(s, "empty chip list", func(i int, p string) (int, error) {
		if p = strings.TrimSpace(p); !isDigits(p) {
			return 0, parseErrorf("chip list %q: entry %d (%q) is not a chip index", s, i, p)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n >= maxExtent {
			return 0, parseErrorf("chip list %q: entry %d (%q) is out of range", s, i, p)
		}
		return n, nil
	}, func(n int) error { return parseErrorf("chip list %q names chip %d twice", s, n) })
}

// parseList parses the comma-separated list s entry by entry (numbered from 1), refusing a repeat with twice.
func parseList[T comparable](s, empty string, entry func(i int, e string) (T, error),
	twice func(T) error) ([]T, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil, parseErrorf("%s", empty)
	}
	seen := map[T]bool{}
	var out []T
	for i, e := range strings.Split(t, ",") {
		v, err := entry(i+1, e)
		if err != nil {
			return nil, err
		}
		if seen[v] {
			return nil, twice(v)
		}
		seen[v] = true
		out = append(out, v)
	}
	return out, nil
}

// ParseHostList is tpurun's one parser of a comma-separated host list (TPU_WORKER_HOSTNAMES, the rendezvous hosts
// option): host names or addresses, trimmed, none empty, none repeated, at most 65536.
func ParseHostList(s string) ([]string, error) {
	if n := strings.Count(strings.TrimSpace(s), ",") + 1; n > maxCount {
		return nil, parseErrorf("host list has %d entries, more than %d", n, maxCount)
	}
	return parseList(s, "empty host list", func(i int, h string) (string, error) {
		if h = strings.TrimSpace(h); h == "" {
			return "", parseErrorf("host list %q: entry %d is empty", s, i)
		}
		if err := hostname.Check(h); err != nil {
			return "", parseErrorf("host list %q: entry %d: %v", s, i, err)
		}
		return h, nil
	}, func(h string) error { return parseErrorf("host list %q names %q twice", s, h) })
}

// ParseTPUEnv parses the metadata's tpu-env: lines `KEY: 'value'` (quotes optional) or blank.
func ParseTPUEnv(body string) (map[string]string, error) {
	out := map[string]string{}
	for i, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		k, v, err := parseTPUEnvLine(i+1, l)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil, parseErrorf("tpu-env is empty")
	}
	return out, nil
}

// parseTPUEnvLine parses line number n of tpu-env, `KEY: 'value'`, trimmed and not blank.
func parseTPUEnvLine(n int, l string) (key, value string, err error) {
	i := strings.IndexByte(l, ':')
	if i <= 0 {
		return "", "", parseErrorf("tpu-env line %d %q is not KEY: 'value'", n, clip(l))
	}
	k, v := strings.TrimSpace(l[:i]), strings.TrimSpace(l[i+1:])
	for _, r := range k {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return "", "", parseErrorf("tpu-env line %d: key %q is not an UPPER_CASE name", n, clip(k))
		}
	}
	if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') {
		if v[len(v)-1] != v[0] {
			return "", "", parseErrorf("tpu-env line %d: value %q has an unmatched quote", n, clip(v))
		}
		v = v[1 : len(v)-1]
	} else if v == "'" || v == "\"" {
		return "", "", parseErrorf("tpu-env line %d: value %q has an unmatched quote", n, v)
	}
	return k, v, nil
}

// parseEndpoints parses the metadata's worker-network-endpoints into the addresses in worker order: each entry
// `name:uid:ip` or, in the newer format, a host name alone (JAX's _get_worker_list_in_slice). names reports a
// host name alone, which torch_xla's get_worker_ips (the third ':'-field) cannot read.
func parseEndpoints(body string) (hosts []string, names bool, err error) {
	hosts, err = parseList(body, "worker-network-endpoints is empty", func(i int, e string) (string, error) {
		f := strings.Split(strings.TrimSpace(e), ":")
		var host string
		switch len(f) {
		case 1:
			host, names = f[0], true
		case 3:
			host = strings.TrimSpace(f[2])
		default:
			return "", parseErrorf("worker-network-endpoints entry %d %q is neither name:uid:ip nor a host name", i, clip(e))
		}
		if host == "" {
			return "", parseErrorf("worker-network-endpoints entry %d %q has no address", i, clip(e))
		}
		if err := hostname.Check(host); err != nil {
			return "", parseErrorf("worker-network-endpoints entry %d: %v", i, err)
		}
		return host, nil
	}, func(h string) error { return parseErrorf("worker-network-endpoints names %q twice", h) })
	return hosts, names && err == nil, err
}

// ParseGPUList parses CUDA_VISIBLE_DEVICES: GPU indices (0,1) or UUIDs (GPU-..., MIG-...), none repeated. A value
// that hides every GPU ("" or -1) is an error, so that nothing is planned on GPUs the workers cannot see.
func ParseGPUList(s string) ([]string, error) {
	if t := strings.TrimSpace(s); t == "" || t == "-1" {
		return nil, parseErrorf("%q hides every GPU from CUDA", s)
	}
	return parseList(s, "", func(i int, p string) (string, error) {
		switch p = strings.TrimSpace(p); {
		case isDigits(p):
			n, err := strconv.Atoi(p)
			if err != nil || n >= maxExtent {
				return "", parseErrorf("GPU list %q: entry %d (%q) is out of range", s, i, p)
			}
			return strconv.Itoa(n), nil
		case (strings.HasPrefix(p, "GPU-") || strings.HasPrefix(p, "MIG-")) && len(p) > 4 && len(p) <= 128 && strings.Trim(p, uuidChars) == "":
			return p, nil
		}
		return "", parseErrorf("GPU list %q: entry %d (%q) is neither a GPU index nor a GPU-/MIG- UUID", s, i, p)
	}, func(p string) error { return parseErrorf("GPU list %q names GPU %s twice", s, p) })
}

// uuidChars are the characters of a GPU or MIG UUID.
const uuidChars = "-/0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
