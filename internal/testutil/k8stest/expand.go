package k8stest

import "strings"

// Expand replaces the $(VAR) references in s as the kubelet does for an env var's value and a container's command
// and args (kubernetes third_party/forked/golang/expansion, Expand with MappingFuncFor): $(NAME) becomes
// lookup(NAME) when lookup knows NAME and stays "$(NAME)" as written when it does not; "$$" is one literal "$"
// (so "$$(NAME)" is the literal "$(NAME)"); a "$" before anything else, and an unclosed "$(", stay as written.
// Expansion is not recursive: a value that holds "$(X)" is not expanded again.
func Expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$': // escaped operator
			b.WriteByte('$')
			i++
		case next == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 { // incomplete reference: "$(" kept, the rest copied on
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
