package console

import "testing"

// TestPrefix: the known variables in each of their forms are replaced, anything else (an unknown name, an
// unclosed brace, a variable's form around a known one) is kept as written.
func TestPrefix(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[{rank}] ", "[3] "},
		{"[{role}{local_rank}]:", "[trainer1]:"},
		{"$rank ${local_rank} $role_name {node} $x ${y} {z}", "3 1 trainer 2 $x ${y} {z}"},
		{"{a$rank}", "{a3}"},
		{"${a{node}}", "${a2}"},
		{"$$rank", "$3"},
		{"$rank0 {}", "$rank0 {}"},
		{"${rank", "${rank"},
		{"{{rank}}", "{3}"},
	} {
		if got := Prefix(c.in, 3, 1, 2, "trainer"); got != c.want {
			t.Errorf("Prefix(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
