package dockertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// File is a parsed Dockerfile: its stages in order.
type File struct {
	Stages []*Stage
}

// Stage is one FROM and the instructions after it.
type Stage struct {
	Name         string // AS name, "" when unnamed
	Base         string // the image FROM names
	Line         int
	Instructions []Instruction
}

// Instruction is one instruction of a stage, continuation lines joined.
type Instruction struct {
	Line  int               // where it starts
	Cmd   string            // upper case: RUN, COPY, USER...
	Flags map[string]string // leading --name=value flags (COPY --from=build)
	Args  string            // the arguments after the flags, as written
	JSON  []string          // the arguments in exec form (a JSON array of strings), nil in shell form
}

// Words are the arguments split on white space (shell form).
func (in Instruction) Words() []string { return strings.Fields(in.Args) }

// known are the instructions Parse accepts.
var known = map[string]bool{"FROM": true, "RUN": true, "COPY": true, "WORKDIR": true, "ENV": true, "USER": true,
	"ENTRYPOINT": true, "CMD": true, "STOPSIGNAL": true, "EXPOSE": true, "LABEL": true}

// ParseFile parses the Dockerfile at path.
func ParseFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	df, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return df, nil
}

// Parse reads a Dockerfile: comment lines (# at the start) and blank lines are skipped, a line ending in a
// backslash continues on the next (comment lines between are skipped, as Docker does).
func Parse(r io.Reader) (*File, error) {
	df := &File{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var text strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if text.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
			text.WriteString(cont)
			continue
		}
		text.WriteString(line)
		if err := df.add(start, text.String()); err != nil {
			return nil, err
		}
		text.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if text.Len() > 0 {
		return nil, fmt.Errorf("line %d: the last instruction ends with a continuation", start)
	}
	if len(df.Stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return df, nil
}

// add parses one instruction, continuation lines joined.
func (df *File) add(line int, text string) error {
	cmd, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	cmd = strings.ToUpper(cmd)
	rest = strings.TrimSpace(rest)
	if !known[cmd] {
		return fmt.Errorf("line %d: instruction %s is not one this parser knows", line, cmd)
	}
	if strings.Contains(rest, "<<") || cmd != "RUN" && strings.Contains(rest, "$") { // RUN's $ is its shell's
		return fmt.Errorf("line %d: %s %s: heredocs and variables are not supported here", line, cmd, rest)
	}
	in := Instruction{Line: line, Cmd: cmd, Flags: map[string]string{}}
	for strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		name, value, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
		in.Flags[name] = value
		rest = strings.TrimSpace(after)
	}
	in.Args = rest
	if strings.HasPrefix(rest, "[") {
		if err := json.Unmarshal([]byte(rest), &in.JSON); err != nil {
			return fmt.Errorf("line %d: %s %s: not a JSON array of strings: %w", line, cmd, rest, err)
		}
	}
	if cmd == "FROM" {
		w := in.Words()
		st := &Stage{Line: line}
		switch {
		case len(w) == 1:
			st.Base = w[0]
		case len(w) == 3 && strings.EqualFold(w[1], "AS"):
			st.Base, st.Name = w[0], w[2]
		default:
			return fmt.Errorf("line %d: FROM %s: want IMAGE [AS NAME]", line, rest)
		}
		df.Stages = append(df.Stages, st)
		return nil
	}
	if len(df.Stages) == 0 {
		return fmt.Errorf("line %d: %s before any FROM", line, cmd)
	}
	st := df.Stages[len(df.Stages)-1]
	st.Instructions = append(st.Instructions, in)
	return nil
}

// Stage is the stage named name, or nil.
func (df *File) Stage(name string) *Stage {
	for _, st := range df.Stages {
		if st.Name == name {
			return st
		}
	}
	return nil
}

// Final is the last stage: the image the build makes.
func (df *File) Final() *Stage { return df.Stages[len(df.Stages)-1] }

// All are the stage's instructions cmd, in order.
func (st *Stage) All(cmd string) []Instruction {
	var out []Instruction
	for _, in := range st.Instructions {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// Last is the stage's last instruction cmd (the one in force for USER, ENTRYPOINT, CMD), or nil.
func (st *Stage) Last(cmd string) *Instruction {
	all := st.All(cmd)
	if len(all) == 0 {
		return nil
	}
	return &all[len(all)-1]
}

// User is the uid and gid the stage's processes run as: its last USER, which must be numeric (uid or uid:gid; a
// name is an error: Kubernetes' runAsNonRoot cannot verify a name, and the kubelet refuses to start such a
// container). Without USER they run as root: 0, 0. A USER with a uid alone runs with that user's group in the
// image's /etc/group, which this cannot read: give uid:gid.
func (st *Stage) User() (uid, gid int, err error) {
	in := st.Last("USER")
	if in == nil {
		return 0, 0, nil
	}
	u, g, ok := strings.Cut(in.Args, ":")
	if !ok {
		return 0, 0, fmt.Errorf("line %d: USER %s: give uid:gid, both numbers", in.Line, in.Args)
	}
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("line %d: USER %s: the user is not a number (runAsNonRoot cannot verify a name)", in.Line, in.Args)
	}
	if gid, err = strconv.Atoi(g); err != nil {
		return 0, 0, fmt.Errorf("line %d: USER %s: the group is not a number", in.Line, in.Args)
	}
	return uid, gid, nil
}

// Entrypoint is the stage's last ENTRYPOINT, which must be in exec form (in shell form /bin/sh would be PID 1, and
// would not pass SIGTERM on).
func (st *Stage) Entrypoint() ([]string, error) {
	in := st.Last("ENTRYPOINT")
	switch {
	case in == nil:
		return nil, fmt.Errorf("no ENTRYPOINT")
	case len(in.JSON) == 0:
		return nil, fmt.Errorf("line %d: ENTRYPOINT %s is not in exec form: a shell would be PID 1", in.Line, in.Args)
	}
	return in.JSON, nil
}
