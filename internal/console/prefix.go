package console

import (
	"regexp"
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
	return prefixVar.ReplaceAllStringFunc(template, func(v string) string {
		if val, ok := vals[strings.Trim(v, "${}")]; ok {
			return val
		}
		return v
	})
}

// prefixVar matches a variable of a prefix template: {name}, ${name} or $name.
var prefixVar = regexp.MustCompile(`\$?\{[^{}$]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
