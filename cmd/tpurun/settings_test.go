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

	"tpurun/internal/setting"
)

// TestEverySettingHasItsFlag: every setting a configuration error can name (a setting.Setting constant) has the flag
// that sets it in flagOf, or a reason in flagless, not both; every flag flagOf names is one of tpurun's; and no
// configuration error of the module names its setting in free words (a string literal that is not a flag): a
// renamed setting, or a new one, cannot silently lose its flag hint.
func TestEverySettingHasItsFlag(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("..", "..", "internal", "setting", "setting.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var settings []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Setting" {
				for _, name := range vs.Names {
					settings = append(settings, name.Name)
				}
			}
		}
		return true
	})
	if len(settings) < 30 {
		t.Fatalf("found %d Setting constants in internal/setting/setting.go: %v", len(settings), settings)
	}
	named := map[string]string{} // constant: the map that names it
	for _, m := range []map[string]string{settingKeys(t, "main.go", "flagOf"), settingKeys(t, "settings_test.go", "flagless")} {
		for k, v := range m {
			if prev, dup := named[k]; dup {
				t.Errorf("failure.%s is in both %s and %s", k, prev, v)
			}
			named[k] = v
		}
	}
	for _, s := range settings {
		if named[s] == "" {
			t.Errorf("failure.%s has no flag in flagOf and no reason in flagless", s)
		}
	}
	for s, why := range flagless {
		if why == "" || flagOf[s] != "" {
			t.Errorf("flagless[%q] = %q, flagOf %q: want a reason, and no flag", s, why, flagOf[s])
		}
	}
	var help, stderr bytes.Buffer
	run([]string{"--help"}, &help, &stderr)
	for s, flag := range flagOf {
		if !strings.Contains(help.String(), "      "+flag+" ") {
			t.Errorf("flagOf[%q] = %s: no such flag in --help", s, flag)
		}
	}
	freeWords(t)
}

// flagless are the settings a message names without a flag: they have none, or their message names them well.
var flagless = map[setting.Setting]string{
	setting.Program: "the positional PROGRAM", setting.Preload: "a flag already",
	setting.Environment: "the workers' whole environment",
	setting.LogFormat:   "parse checks --log-format first",
	setting.NProcs:      "the message names the split and its sources", setting.RendezvousTimeout: "a Spec's own",
	setting.RendezvousHostsOption: "the message names the option", setting.RendezvousListen: "the endpoint's port",
	setting.RendezvousHosts: "the host list detected or given",
}

// settingKeys are the failure.X keys of the map literal assigned to the package variable name in file.
func settingKeys(t *testing.T, file, name string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name || len(vs.Values) != 1 {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			if sel, ok := e.(*ast.KeyValueExpr).Key.(*ast.SelectorExpr); ok {
				out[sel.Sel.Name] = name
			} else {
				t.Errorf("%s has a key that is not a setting.Setting constant", name)
			}
		}
		return false
	})
	if len(out) == 0 {
		t.Fatalf("no map %s in %s", name, file)
	}
	return out
}

// freeWords fails for every ConfigError literal of the module (outside tests) whose Field is a string literal that
// is not a flag.
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
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok || !isConfigError(cl.Type) {
				return true
			}
			for _, e := range cl.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if k, _ := kv.Key.(*ast.Ident); !ok || k == nil || k.Name != "Field" {
					continue
				}
				if lit, ok := kv.Value.(*ast.BasicLit); ok {
					if v, _ := strconv.Unquote(lit.Value); !strings.HasPrefix(v, "--") {
						t.Errorf("%s: a ConfigError names its setting as %s: use a setting.Setting constant", path, lit.Value)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isConfigError reports whether t is failure.ConfigError (or ConfigError inside package failure).
func isConfigError(t ast.Expr) bool {
	switch x := t.(type) {
	case *ast.Ident:
		return x.Name == "ConfigError"
	case *ast.SelectorExpr:
		pkg, _ := x.X.(*ast.Ident)
		return x.Sel.Name == "ConfigError" && pkg != nil && pkg.Name == "failure"
	}
	return false
}
