package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmePackageTable holds the README's package table to the tree: one row per package that has product code
// (a non-test .go file), each named once, and no row for a package that is not there. The documentation and
// example packages (docs, examples/...) are left out: the README describes them where it uses them.
func TestReadmePackageTable(t *testing.T) {
	root := ".."
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(readme), "| package | owns |")
	if i < 0 {
		t.Fatal("README.md has no package table (| package | owns |)")
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	var listed []string
	for _, line := range strings.Split(string(readme[i:]), "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("row %q does not name one package in its first cell", line)
			continue
		}
		listed = append(listed, m[1])
	}
	var have []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || rel == "docs" || rel == "examples" || rel == "dist" || rel == "build") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			have = append(have, filepath.ToSlash(filepath.Dir(rel)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(have)
	have = slices.Compact(have)
	for _, p := range have {
		if !slices.Contains(listed, p) {
			t.Errorf("package %s has no row in the README's package table", p)
		}
	}
	seen := map[string]bool{}
	for _, p := range listed {
		if seen[p] {
			t.Errorf("package %s has two rows", p)
		}
		seen[p] = true
		if !slices.Contains(have, p) {
			t.Errorf("the README's package table names %s, which has no product code in the tree", p)
		}
	}
}
