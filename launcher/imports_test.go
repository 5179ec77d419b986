package launcher_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// importRules are the layering of the module, as "package may not import prefix" (a prefix ending in "/" covers
// the packages under it; without one it is that package only). A rule's package covers the packages below it,
// unless it ends in "$" (that package only). Test files are held to the rules below cmd too.
var importRules = []struct{ pkg, forbidden, why string }{
	{"launcher", "tpurun/cmd/", "nothing below cmd imports cmd"},
	{"rendezvous", "tpurun/cmd/", "nothing below cmd imports cmd"},
	{"worker", "tpurun/cmd/", "nothing below cmd imports cmd"},
	{"launcher", "tpurun", "nothing imports the module root (launcher's parent)"},
	{"rendezvous", "tpurun", "nothing imports the module root (launcher's parent)"},
	{"worker", "tpurun/launcher", "worker, the workers' side of the contract, imports nothing of the launcher"},
	{"worker", "tpurun/launcher/", "worker, the workers' side of the contract, imports nothing of the launcher"},
	{"worker", "tpurun/rendezvous", "worker imports nothing of the launcher"},
	{"worker", "tpurun/internal/", "a Go worker carries nothing of the launcher: installing the Python module is internal/pymodule's"},
	{"internal/pymodule", "tpurun/internal/", "installing the Python module knows nothing of the launcher around it"},
	{"internal/preload", "tpurun/internal/host", "the preloaded interpreter is below the host's preparation that starts it"},
	{"rendezvous", "tpurun/launcher", "rendezvous is injected into the launcher, not the other way round"},
	{"rendezvous", "tpurun/launcher/", "rendezvous is injected into the launcher, not the other way round"},
	{"internal/topology", "tpurun/rendezvous", "planning is pure: topology knows no rendezvous"},
	{"internal/topology", "text/tabwriter", "detection and planning print no tables: doctor's and plan's are cmd/tpurun/internal/hostview's"},
	{"internal/attempt", "tpurun/rendezvous", "an attempt is this node's workers: the world and its rendezvous are the job's"},
	{"internal", "tpurun/launcher", "nothing under internal/ imports the public facade above it"},
	{"internal", "tpurun/cmd/", "nothing under internal/ imports cmd"},
	{"internal/attempt", "tpurun/internal/job", "imports point down: job -> attempt -> proc"},
	{"internal/attempt", "tpurun/internal/host", "the attempt takes a narrow Runner that the job fills, not the host's preparation"},
	{"internal/attempt", "tpurun/internal/spec", "the attempt takes a narrow Runner that the job fills, not the job's Spec"},
	{"internal/host", "tpurun/internal/job", "the host's preparation is below the job"},
	{"internal/host", "tpurun/internal/attempt", "the host's preparation knows no attempt: the job hands its starter over"},
	{"internal/spec", "tpurun/internal/job", "the Spec and the Report are below the job that reads and writes them"},
	{"internal/spec", "tpurun/internal/host", "the Spec and the Report are below the host's preparation"},
	{"internal/proc", "tpurun/internal/attempt", "imports point down: attempt -> proc"},
	{"internal/stop", "tpurun/internal/attempt", "the stop controller drives an attempt through its own small interface: job -> attempt -> stop"},
	{"internal/stop", "tpurun/internal/job", "imports point down: job -> stop"},
	{"internal/stop", "tpurun/rendezvous", "the stop vocabulary knows no rendezvous: the job turns its news into causes"},
	{"internal/proc", "tpurun/internal/stop", "imports point down: stop -> proc"},
	{"internal/proc", "tpurun/internal/job", "imports point down: job -> attempt -> proc"},
	{"internal/failure", "tpurun/", "a job's errors, settings and exit codes are the lowest layer: every layer's errors match its categories"},
	{"cmd/tpurun/internal/cli", "tpurun/launcher", "the command line describes a Spec; they do not run the launcher"},
	// main itself ($: that package only; its packages below read the types a Spec and a Report name: the CLI a
	// rendezvous bound, the summary a results document)
	{"cmd/tpurun$", "tpurun/rendezvous", "cmd describes a Spec; the launcher owns the rendezvous"},
	{"cmd/tpurun$", "tpurun/internal/results", "cmd describes a Spec; the launcher owns result collection"},
}

// aboveRules are the packages that stand above the launcher, observing or showing what it reports: no code of the
// launcher or below it imports them. Tests may: a test stands above what it tests.
var aboveRules = []struct{ pkg, forbidden, why string }{
	{"launcher", "tpurun/cmd/tpurun/internal/status", "the status server observes the launcher; the launcher does not know it"},
	{"launcher", "tpurun/cmd/tpurun/internal/summary", "the summary shows what the launcher reports; the launcher does not print"},
}

// backendRules keep the rendezvous API apart from its backends, in code (a test of the API runs it on the backends,
// which it imports so that they register): the API and the kit the backends share (rendezvous/internal/agree)
// import none of them, and a backend imports the API, the kit and the backend it meets on (static: tcp's server),
// nothing of the launcher's internals but the leaf vocabulary of settings its configuration errors name
// (leafShared). Each rule is for the package pkg alone, not those under it.
var backendRules = []struct{ pkg, forbidden, why string }{
	{"rendezvous", "tpurun/rendezvous/", "the rendezvous API imports none of its backends: they register themselves"},
	{"rendezvous/internal/agree", "tpurun/rendezvous/", "the backends' kit imports none of them: they import it"},
	{"rendezvous/tcp", "tpurun/internal/", "a rendezvous backend imports nothing of the launcher's internals"},
	{"rendezvous/static", "tpurun/internal/", "a rendezvous backend imports nothing of the launcher's internals"},
	{"rendezvous/etcd", "tpurun/internal/", "a rendezvous backend imports nothing of the launcher's internals"},
	{"rendezvous/tcp", "tpurun/rendezvous/static", "static meets on tcp's server, not the other way round"},
	{"rendezvous/tcp", "tpurun/rendezvous/etcd", "one rendezvous backend does not import another"},
	{"rendezvous/etcd", "tpurun/rendezvous/tcp", "one rendezvous backend does not import another"},
	{"rendezvous/etcd", "tpurun/rendezvous/static", "one rendezvous backend does not import another"},
}

// violations lists "pkg (file) imports X: why" for every rule an import breaks. imports maps a package directory
// (relative to the module root, slash-separated) and file name to the file's imports.
func violations(imports map[[2]string][]string, tests bool) []string {
	var out []string
	for key, list := range imports {
		dir, file := key[0], key[1]
		isTest := strings.HasSuffix(file, "_test.go")
		for i, r := range slices.Concat(importRules, aboveRules) {
			above := i >= len(importRules)
			pkg, only := strings.CutSuffix(r.pkg, "$")
			if dir != pkg && (only || !strings.HasPrefix(dir, pkg+"/")) || isTest && (!tests || above || strings.HasPrefix(pkg, "cmd/")) {
				continue
			}
			for _, imp := range list {
				hit := imp == r.forbidden || strings.HasSuffix(r.forbidden, "/") && strings.HasPrefix(imp, r.forbidden)
				if hit && !excepted(dir, isTest, imp) {
					out = append(out, dir+"/"+file+" imports "+imp+": "+r.why)
				}
			}
		}
	}
	out = append(out, backendViolations(imports)...)
	slices.Sort(out)
	return out
}

// excepted reports whether a file of package dir (a test, or not) may import imp whatever the rules say: a
// package's external test imports the package, and internal/testutil is shared test plumbing: a test of any
// package may use it, and so may another test-plumbing package (internal/testutil/etcdtest).
func excepted(dir string, isTest bool, imp string) bool {
	plumbing := isTest || strings.HasSuffix(path.Base(dir), "test")
	return imp == "tpurun/"+dir || plumbing && imp == "tpurun/internal/testutil"
}

// leafShared are the packages under internal/ that import nothing of tpurun and that every layer may use: the
// settings a rendezvous backend's configuration errors name, and the category they match (failure.ErrConfig).
var leafShared = []string{"tpurun/internal/failure"}

// backendViolations lists "pkg (file) imports X: why" for every backendRules rule an import of code breaks.
func backendViolations(imports map[[2]string][]string) []string {
	var out []string
	for key, list := range imports {
		dir, file := key[0], key[1]
		for _, r := range backendRules {
			if dir != r.pkg || strings.HasSuffix(file, "_test.go") {
				continue
			}
			for _, imp := range list {
				hit := imp == r.forbidden || strings.HasSuffix(r.forbidden, "/") && strings.HasPrefix(imp, r.forbidden)
				if hit && !slices.Contains(leafShared, imp) {
					out = append(out, dir+"/"+file+" imports "+imp+": "+r.why)
				}
			}
		}
	}
	return out
}

// moduleImports parses the import block of every Go file of the module.
func moduleImports(t *testing.T, root string) map[[2]string][]string {
	t.Helper()
	out := map[[2]string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		key := [2]string{filepath.ToSlash(rel), filepath.Base(path)}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[key] = append(out[key], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportRules: the module's layering holds (see importRules), and the check itself catches a forbidden import
// of each kind when one is planted.
func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	imports := moduleImports(t, root)
	if len(imports) < 50 {
		t.Fatalf("parsed only %d files under %s", len(imports), root)
	}
	if v := violations(imports, true); len(v) > 0 {
		t.Errorf("%d import rules broken:\n%s", len(v), strings.Join(v, "\n"))
	}
	planted := map[[2]string][]string{
		{"worker", "x.go"}:                      {"tpurun/internal/results"},
		{"worker/python", "x.go"}:               {"tpurun/internal/pymodule"},
		{"internal/pymodule", "x.go"}:           {"tpurun/internal/proc"},
		{"internal/preload", "x.go"}:            {"tpurun/internal/host", "tpurun/internal/proc"}, // the second is allowed
		{"internal/proc", "x.go"}:               {"tpurun/cmd/tpurun"},
		{"rendezvous", "x_test.go"}:             {"tpurun/launcher"},
		{"cmd/tpurun", "x.go"}:                  {"tpurun/rendezvous", "tpurun/internal/results"},
		{"internal/stop", "x.go"}:               {"tpurun/internal/attempt"},
		{"internal/topology", "x.go"}:           {"tpurun/rendezvous", "text/tabwriter"},
		{"internal/proc", "y.go"}:               {"tpurun/cmd/tpurun/internal/status"},
		{"internal/console", "x.go"}:            {"tpurun/launcher", "tpurun/internal/failure"},  // the second is allowed
		{"internal/attempt", "x.go"}:            {"tpurun/internal/proc", "tpurun/internal/job"}, // the first is allowed
		{"internal/host", "x.go"}:               {"tpurun/internal/attempt"},
		{"internal/results", "x.go"}:            {"tpurun/cmd/tpurun/internal/summary"},
		{"launcher", "y_test.go"}:               {"tpurun/cmd/tpurun/internal/summary"}, // a test below cmd imports no cmd either
		{"cmd/tpurun/internal/summary", "x.go"}: {"tpurun/internal/results"},            // allowed: main's rules are main's
		{"launcher", "x_test.go"}:               {"tpurun/internal/testutil"},           // allowed
		{"internal/testutil/etcdtest", "x.go"}:  {"tpurun/internal/testutil"},           // allowed: test plumbing
		{"rendezvous", "x_test.go"}:             {"tpurun/launcher"},
		{"rendezvous", "y.go"}:                  {"tpurun/rendezvous/tcp"},
		{"rendezvous", "y_test.go"}:             {"tpurun/rendezvous/tcp", "tpurun/internal/testutil/rdzvtest"}, // allowed
		{"rendezvous/etcd", "x.go"}:             {"tpurun/internal/proc", "tpurun/rendezvous/tcp", "tpurun/rendezvous"},
		{"rendezvous/static", "x.go"}:           {"tpurun/rendezvous/tcp"},   // allowed
		{"rendezvous/tcp", "y.go"}:              {"tpurun/internal/failure"}, // allowed: the leaf vocabulary
		{"internal/failure", "x.go"}:            {"tpurun/internal/proc"},
	}
	if v := violations(planted, true); len(v) != 21 {
		t.Errorf("planted violations found: %d, want 21:\n%s", len(v), strings.Join(v, "\n"))
	}
}
