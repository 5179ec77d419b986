package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// wayOuts are tpurun's switches that let a refused run go on, each with the words a message would use for it
// without the flag. A message that offers one of these ways on names the flag, which is what a user types: the
// held-chip refusal said "stop that process (or force the start anyway)", and nobody could tell from it that the way
// on was --force.
var wayOuts = map[string]*regexp.Regexp{
	"--force":               regexp.MustCompile(`(?i)\bforc(e|ing)\b`),
	"--status-allow-remote": regexp.MustCompile(`(?i)\ballow(ing)? remote\b`),
}

// TestEveryWayOutNamesItsFlag: no message of the module (a string literal of its code, tests aside) speaks of one of
// the wayOuts in words without naming its flag; and each flag is one of tpurun's (a renamed flag fails here). The
// refusals themselves are held to their flag where they are made: the held chip in TestHeldChipRefusesUnlessForce,
// a status endpoint off loopback in TestStatusAddrNonLoopbackRefused.
func TestEveryWayOutNamesItsFlag(t *testing.T) {
	t.Parallel()
	var help, stderr bytes.Buffer
	run([]string{"--help"}, &help, &stderr)
	for flag := range wayOuts {
		if !strings.Contains(help.String(), "      "+flag+" ") {
			t.Errorf("wayOuts names %s: no such flag in --help", flag)
		}
	}
	for _, m := range wordsWithoutFlag(t, filepath.Join("..", "..")) {
		t.Error(m)
	}
}

// wordsWithoutFlag lists, for every string literal of the Go code under root (tests aside) that speaks of a way out
// in words without its flag, where it is and what it lacks. The flag's own name, a literal alone ("force"), is the
// flag's registration, not a message.
func wordsWithoutFlag(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for flag, words := range wayOuts {
				if words.MatchString(s) && !strings.Contains(s, flag) && s != strings.TrimPrefix(flag, "--") {
					out = append(out, fset.Position(lit.Pos()).String()+": "+lit.Value+" speaks of "+flag+" without naming it")
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWordsWithoutFlagFindsThem: the scan finds what it is for, and leaves the flag's own name and a message that
// names the flag alone.
func TestWordsWithoutFlagFindsThem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := "package x\n\nvar (\n" +
		"\ta = \"stop that process (or force the start anyway)\"\n" + // the held chip's old words
		"\tb = \"use 127.0.0.1:PORT, or allow remote clients explicitly\"\n" +
		"\tc = \"stop that process, or start anyway with --force\"\n" +
		"\td = \"force\"\n" +
		"\te = \"starting although another process holds a chip (forced)\"\n" +
		")\n"
	mustDo(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x\n\nvar f = \"force it\"\n"), 0o644))
	got := wordsWithoutFlag(t, dir)
	if len(got) != 2 || !strings.Contains(got[0]+got[1], "x.go:4:") || !strings.Contains(got[0]+got[1], "x.go:5:") {
		t.Fatalf("found %q, want lines 4 and 5 of x.go", got)
	}
}
