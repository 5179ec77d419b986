package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
)

// TestEverySettingHasItsFlag: every setting a configuration error can name (a constant of internal/failure) is
// bound to the flag that sets it, where the flag is defined (cli.Bind), or has a reason in flagless, not both;
// every setting a flag is bound to is one of those constants, bound to that flag alone; every bound flag is one of
// tpurun's in --help; no configuration error of the module names its setting in free words (a string literal that
// is not a flag); and no code outside internal/failure casts a name into a Setting (a variable or a flag that names
// itself is failure.Named): a renamed setting, or a new one, cannot silently lose its flag hint.
func TestEverySettingHasItsFlag(t *testing.T) {
	settings := settingConstants(t)
	if len(settings) < 30 {
		t.Fatalf("found %d Setting constants in internal/failure/setting.go: %v", len(settings), settings)
	}
	o, _, _ := newFlags()
	flagOf := map[string]string{} // a setting's value: the flag bound to it
	o.flags.VisitAll(func(f *pflag.Flag) {
		for _, s := range f.Annotations[cli.SettingKey] {
			if prev, dup := flagOf[s]; dup {
				t.Errorf("setting %q is bound to both --%s and %s", s, f.Name, prev)
			}
			flagOf[s] = "--" + f.Name
		}
	})
	consts := map[string]string{} // a setting's value: its constant's name
	for name, v := range settings {
		consts[v] = name
		why := flagless[failure.Setting(v)]
		switch {
		case flagOf[v] == "" && why == "":
			t.Errorf("setting.%s is bound to no flag (cli.Bind) and has no reason in flagless", name)
		case flagOf[v] != "" && why != "":
			t.Errorf("setting.%s is bound to %s and has a reason in flagless (%q): want one of them", name, flagOf[v], why)
		}
	}
	for s := range flagless {
		if consts[string(s)] == "" {
			t.Errorf("flagless[%q]: not a constant of internal/failure", s)
		}
	}
	var help, stderr bytes.Buffer
	run([]string{"--help"}, &help, &stderr)
	for s, flag := range flagOf {
		if consts[s] == "" {
			t.Errorf("%s is bound to %q, which is not a constant of internal/failure", flag, s)
		}
		if !strings.Contains(help.String(), "      "+flag+" ") {
			t.Errorf("setting %q is bound to %s: no such flag in --help", s, flag)
		}
	}
	freeWords(t)
}

// flagless are the settings a message names without a flag: they have none, or their message names them well.
var flagless = map[failure.Setting]string{
	failure.Program: "the positional PROGRAM", failure.Preload: "a flag already",
	failure.Environment: "the workers' whole environment", failure.LogFormat: "parse checks --log-format first",
	failure.NProcs: "the message names the split and its sources", failure.RendezvousTimeout: "a Spec's own",
	failure.RendezvousHostsOption: "the message names the option", failure.RendezvousListen: "the endpoint's port",
	failure.RendezvousHosts: "the host list detected or given",
}

// settingConstants are the Setting constants of internal/failure/setting.go: each one's name and value.
func settingConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "internal", "failure", "setting.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, _ := vs.Type.(*ast.Ident); id == nil || id.Name != "Setting" {
			return true
		}
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok {
				t.Fatalf("setting.%s is not a string literal", name.Name)
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("setting.%s: %v", name.Name, err)
			}
			out[name.Name] = v
		}
		return true
	})
	return out
}

// freeWords fails for every configuration error of the module (outside tests) that names its setting as a string
// literal that is not a flag (a failure.ConfigError's Field, agree.ConfigError's first argument), and for
// every conversion of a name into a failure.Setting outside internal/failure.
func freeWords(t *testing.T) {
	t.Helper()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		inSetting := filepath.Base(filepath.Dir(path)) == "failure" && f.Name.Name == "failure"
		ast.Inspect(f, func(n ast.Node) bool {
			for _, m := range settingWords(n, inSetting) {
				t.Errorf("%s: %s", path, m)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// settingWords says what is wrong with how node n names a setting, if anything: a failure.ConfigError literal whose
// Field is a literal that is not a flag, an agree.ConfigError call whose setting is a literal, or (outside
// package failure) a conversion into failure.Setting.
func settingWords(n ast.Node, inSetting bool) []string {
	var out []string
	switch x := n.(type) {
	case *ast.CompositeLit:
		if !isConfigError(x.Type) {
			return nil
		}
		for _, e := range x.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			k, _ := kv.Key.(*ast.Ident)
			lit, isLit := kv.Value.(*ast.BasicLit)
			if k == nil || k.Name != "Field" || !isLit {
				continue
			}
			if v, _ := strconv.Unquote(lit.Value); !strings.HasPrefix(v, "--") {
				out = append(out, "a ConfigError names its setting as "+lit.Value+": use a failure.Setting constant")
			}
		}
	case *ast.CallExpr:
		switch {
		case isSelector(x.Fun, "failure", "Setting") && !inSetting:
			out = append(out, "a name cast into a failure.Setting: use a constant of internal/failure, or failure.Named")
		case isSelector(x.Fun, "agree", "ConfigError") && len(x.Args) > 0:
			if lit, ok := x.Args[0].(*ast.BasicLit); ok {
				out = append(out, "an agree.ConfigError names its setting as "+lit.Value+": use a failure.Setting constant")
			}
		}
	}
	return out
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, _ := sel.X.(*ast.Ident)
	return id != nil && id.Name == pkg && sel.Sel.Name == name
}

// isConfigError reports whether t is failure.ConfigError (or ConfigError inside package failure).
func isConfigError(t ast.Expr) bool {
	if id, ok := t.(*ast.Ident); ok {
		return id.Name == "ConfigError"
	}
	return isSelector(t, "failure", "ConfigError")
}

// TestSettingWordsFindsThem: the scan finds a setting named in free words, in a literal or a call, and a cast into
// a Setting; it leaves a flag, a constant, failure.Named and the casts of package failure itself.
func TestSettingWordsFindsThem(t *testing.T) {
	src := `package x

var (
	a = &failure.ConfigError{Field: "grace period", Value: "x"}
	b = &failure.ConfigError{Field: "--redirects", Value: "x"}
	c = &failure.ConfigError{Field: failure.Grace, Value: "x"}
	d = agree.ConfigError("endpoint", "x", "bad")
	e = agree.ConfigError(failure.RendezvousEndpoint, "x", "bad")
	f = failure.Setting(name)
	g = failure.Named(name)
)
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		found = append(found, settingWords(n, false)...)
		return true
	})
	if len(found) != 3 || !strings.Contains(found[0], `"grace period"`) || !strings.Contains(found[1], `"endpoint"`) ||
		!strings.Contains(found[2], "cast") {
		t.Errorf("found %q, want the lines of a, d and f", found)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if m := settingWords(n, true); len(m) > 0 && strings.Contains(m[0], "cast") {
			t.Errorf("in package failure: %q", m)
		}
		return true
	})
}
