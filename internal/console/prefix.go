package console

import (
	"strconv"
	"strings"
)

// DefaultPrefix is the line prefix of a worker's output when a prefix is asked for without a template: its rank.
const DefaultPrefix = "[{rank}] "

// TeePrefix is torchrun's prefix of the lines it tees to its console: the role and the local rank
// ("[default0]:"), as torch.distributed.elastic writes it.
const TeePrefix = "[{role}{local_rank}]:"

// Prefix expands a --log-prefix template for one worker: {rank}, {local_rank}, {node} and {role} are replaced,
// and so are torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE names ($rank, ${local_rank}, $role_name; a Python
// string.Template under torchrun). Anything else, an unknown $name included, is kept as written.
func Prefix(template string, rank, localRank, node int, role string) string {
	vals := map[string]string{"rank": strconv.Itoa(rank), "local_rank": strconv.Itoa(localRank), "node": strconv.Itoa(node),
		"role": role, "role_name": role}
	var b strings.Builder
	for i := 0; i < len(template); {
		if v, n := prefixVar(template[i:], vals); n > 0 {
			b.WriteString(v)
			i += n
			continue
		}
		b.WriteByte(template[i])
		i++
	}
	return b.String()
}

// prefixVar reads one known variable at the start of t ({name}, ${name} or $name) and returns its value and the
// bytes it spans; n is 0 when t does not start with one.
func prefixVar(t string, vals map[string]string) (v string, n int) {
	name := ""
	switch {
	case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "${"):
		open := strings.IndexByte(t, '{')
		end := strings.IndexByte(t, '}')
		if end < 0 {
			return "", 0
		}
		name, n = t[open+1:end], end+1
	case strings.HasPrefix(t, "$"):
		n = 1
		for n < len(t) && (t[n] == '_' || t[n] >= 'a' && t[n] <= 'z' || t[n] >= 'A' && t[n] <= 'Z' || n > 1 && t[n] >= '0' && t[n] <= '9') {
			n++
		}
		name = t[1:n]
	default:
		return "", 0
	}
	if v, ok := vals[name]; ok {
		return v, n
	}
	return "", 0
}
