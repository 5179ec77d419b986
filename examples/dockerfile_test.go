// Package examples_test checks examples/Dockerfile, the image the JobSets of examples/kubernetes run. (train.py,
// their program, runs in the doc test: it is the README's first example.)
package examples_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/dockertest"
)

// repoRoot is the build context of `docker build -f examples/Dockerfile .`, as the Dockerfile's usage says.
var repoRoot = filepath.Join("..")

func parseDockerfile(t *testing.T) *dockertest.File {
	t.Helper()
	df, err := dockertest.ParseFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return df
}

// TestDockerIgnore: the context a build of the repository sends leaves out bin/, .git (a clone's directory and a
// worktree's file alike), make wheel's dist/ and build/, and test and build output at any depth, and keeps every source the build needs; the
// repository's own .dockerignore, matched by Docker's own matcher, on a context planted with each of them.
func TestDockerIgnore(t *testing.T) {
	t.Parallel()
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore at the repository's root: `COPY . .` would send bin/ and .git: %v", err)
	}
	kept := []string{".dockerignore", "go.mod", "go.sum", "cmd/tpurun/main.go", "cmd/tpurun/help/multihost.txt",
		"worker/python/tpurun/__init__.py", "examples/train.py", "examples/Dockerfile", "launcher/testdata/fuzz/FuzzX/1a2b",
		"docs/TESTING.md", "examples/hello/main.go"}
	left := []string{"bin/tpurun", "bin/hello", ".git/HEAD", ".git/objects/ab/cdef0123", "tpurun", "out.json",
		"logs/4721aacd4b76_1/attempt_0/0/stdout.log", "tpurun.test", "cmd/tpurun/tpurun.test", "launcher/cpu.prof",
		"c.out", "rendezvous/c.out", "worker/python/tpurun/__pycache__/fn.cpython-311.pyc", "examples/fn_square.pyc",
		"launcher/testdata/fuzz/FuzzX/corpus-cache/00ff",
		"dist/tpurun-0.2.0-py3-none-manylinux_2_17_x86_64.whl", "build/lib/tpurun/__init__.py", "build/scripts-3.11/tpurun"}
	for _, worktree := range []bool{false, true} {
		dir := t.TempDir()
		files := slices.Concat(kept, left)
		if worktree { // a `git worktree`'s .git is a file naming the repository's
			files = slices.Concat(kept, slices.DeleteFunc(slices.Clone(left), func(f string) bool { return strings.HasPrefix(f, ".git/") }), []string{".git"})
		}
		for _, f := range files {
			p := filepath.Join(dir, filepath.FromSlash(f))
			mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
			mustDo(t, os.WriteFile(p, []byte(f), 0o644))
		}
		mustDo(t, os.WriteFile(filepath.Join(dir, ".dockerignore"), ignore, 0o644))
		sent, err := dockertest.SendContext(dir, t.TempDir())
		mustDo(t, err)
		slices.Sort(sent)
		want := slices.Sorted(slices.Values(kept))
		if !slices.Equal(sent, want) {
			t.Errorf("worktree %v: .dockerignore sends\n  %s\nwant\n  %s", worktree, strings.Join(sent, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// TestDockerfileBuildStage runs examples/Dockerfile's build stage as shell steps in a copy of the context the
// repository sends (.dockerignore applied): WORKDIR, COPY go.mod go.sum, go mod download, COPY . ., go build, as
// the Dockerfile says them, offline (GOPROXY=off, this machine's module cache). The modules are downloaded in a
// layer of their own, before any source is copied, so that a change of the source does not download them again;
// the binaries the runtime stage copies (tpurun, and tpurun-etcd beside it) are static (no interpreter, no shared
// library) and run.
//
// It takes about 10 CPU-seconds: go build compiles tpurun's own packages again in the new directory (their
// dependencies come from the build cache). Worth it: it is the one check that the image builds from what
// .dockerignore lets through (a pattern that drops an embedded file fails here, not in a user's docker build).
func TestDockerfileBuildStage(t *testing.T) {
	t.Parallel()
	goTool := testutil.Need(t, "go")
	df := parseDockerfile(t)
	build := df.Stage("build")
	if build == nil {
		t.Fatal("examples/Dockerfile has no stage named build")
	}
	checkModulesLayer(t, build)
	buildContext := t.TempDir()
	sent, err := dockertest.SendContext(repoRoot, buildContext)
	mustDo(t, err)
	for _, f := range sent {
		if f == ".git" || strings.HasPrefix(f, ".git/") || strings.HasPrefix(f, "bin/") || strings.HasPrefix(f, "dist/") || strings.HasPrefix(f, "build/") {
			t.Errorf("the build context holds %s: .dockerignore must leave bin/, dist/, build/ and .git out", f)
		}
	}
	env := []string{"PATH=" + filepath.Dir(goTool) + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "GOPROXY=off", "GOTOOLCHAIN=local"}
	for _, k := range []string{"GOMODCACHE", "GOCACHE"} { // the machine's: warm, as the image's layer would be
		out, err := exec.Command(goTool, "env", k).Output()
		mustDo(t, err)
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline())
	defer cancel()
	modulesCached(ctx, t, goTool, env)
	root := t.TempDir() // the build stage's filesystem
	var log bytes.Buffer
	if err := build.Build(ctx, root, buildContext, env, &log); err != nil {
		t.Fatalf("the build stage of examples/Dockerfile failed: %v (%v)\n%s", err, ctx.Err(), log.String())
	}
	copies := binaryCopies(df)
	for _, name := range []string{"tpurun", "tpurun-etcd"} {
		c, ok := copies[name]
		if !ok {
			t.Errorf("the runtime stage has no COPY --from=build SRC DEST of %s", name)
			continue
		}
		bin := filepath.Join(root, filepath.FromSlash(c[0]))
		checkStatic(t, bin)
		if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
			t.Errorf("%s --version: %v\n%s", c[0], err, out)
		}
		// the etcd build runs etcd itself: its help does not say it hands etcd to tpurun-etcd
		if out, err := exec.Command(bin, "--help").Output(); name == "tpurun-etcd" && bytes.Contains(out, []byte("run by tpurun-etcd")) {
			t.Errorf("%s --help (%v): want the build with the etcd client (-tags etcd), which runs etcd itself", c[0], err)
		}
	}
	// tpurun is ENTRYPOINT's first word and the JobSets' command: the runtime image's PATH must find it there; it
	// hands a run on etcd to tpurun-etcd, which it finds beside itself (an image without it exits 2 on etcd).
	to := copies["tpurun"][1]
	if dir := path.Dir(to); !slices.Contains(strings.Split(debianPath, ":"), dir) {
		t.Errorf("the runtime stage copies tpurun to %s: want a directory of the image's PATH (%s)", to, debianPath)
	}
	if etcd := copies["tpurun-etcd"][1]; etcd != "" && path.Dir(etcd) != path.Dir(to) {
		t.Errorf("the runtime stage copies tpurun-etcd to %s: want it beside tpurun (%s)", etcd, to)
	}
}

// modulesCached fails under CI, and skips elsewhere, unless the module cache holds every module go.mod names:
// the image's go mod download fetches them all, and here it runs offline. A build of the tests fetches only the
// modules whose packages they import (not gopsutil's Windows-only go-ole, say); .ci/deps runs go mod download.
func modulesCached(ctx context.Context, t *testing.T, goTool string, env []string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, goTool, "mod", "download")
	cmd.Dir, cmd.Env = repoRoot, env
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("the module cache lacks modules of go.mod (run go mod download, as .ci/deps does): %v\n%s", err, out)
	if os.Getenv(testutil.EnvCI) == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
}

// debianPath is the PATH of Debian's images (debian:bookworm-slim), which the runtime stage keeps.
const debianPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// checkModulesLayer: the stage's `go mod download` runs after a COPY of go.mod and go.sum alone, before any other
// COPY, and its `go build` after the source is copied.
func checkModulesLayer(t *testing.T, build *dockertest.Stage) {
	t.Helper()
	var copies [][]string
	download, compile := -1, -1
	for i, in := range build.Instructions {
		switch {
		case in.Cmd == "COPY":
			w := in.Words()
			copies = append(copies, w[:len(w)-1])
		case in.Cmd == "RUN" && strings.Contains(in.Args, "go mod download") && download < 0:
			download = i
			if len(copies) != 1 || !slices.Equal(slices.Sorted(slices.Values(copies[0])), []string{"go.mod", "go.sum"}) {
				t.Errorf("line %d: go mod download runs after COPY %v: want one COPY go.mod go.sum before it (a layer that "+
					"only a change of the modules invalidates)", in.Line, copies)
			}
		case in.Cmd == "RUN" && strings.Contains(in.Args, "go build"):
			compile = i
			if !strings.Contains(in.Args, "CGO_ENABLED=0") {
				t.Errorf("line %d: RUN %s: build the static binary as make build does (CGO_ENABLED=0)", in.Line, in.Args)
			}
		}
	}
	if download < 0 || compile < download || len(copies) < 2 {
		t.Errorf("the build stage downloads the modules at step %d and builds at step %d after %d COPY: want go mod "+
			"download, then COPY of the source, then go build", download, compile, len(copies))
	}
}

// binaryCopies are the runtime stage's COPY --from=build SRC DEST, by the file name of DEST: the build stage's
// path of each binary, and the image's.
func binaryCopies(df *dockertest.File) map[string][2]string {
	out := map[string][2]string{}
	for _, in := range df.Final().All("COPY") {
		if w := in.Words(); in.Flags["from"] == "build" && len(w) == 2 {
			out[path.Base(w[1])] = [2]string{w[0], w[1]}
		}
	}
	return out
}

// checkStatic: bin is an ELF executable with no program interpreter and no shared library: it runs in any image.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the build stage's binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: linked to this machine's C library, not static", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v): not static", bin, libs, err)
	}
}

// TestDockerfileRuntimeStage: the image runs tpurun as a user that is not root, numeric (uid:gid, which
// Kubernetes' runAsNonRoot can verify) and made in the image with a home (tpurun installs its Python module in the
// user's cache); its ENTRYPOINT is tpurun in exec form; and both are what the README's "Container entrypoint" says.
// cmd/tpurun/pid1_test.go runs that ENTRYPOINT as PID 1, as that user.
func TestDockerfileRuntimeStage(t *testing.T) {
	t.Parallel()
	final := parseDockerfile(t).Final()
	uid, gid, err := final.User()
	if err != nil {
		t.Fatal(err)
	}
	if uid == 0 || gid == 0 {
		t.Errorf("the runtime stage runs as %d:%d: want a user and group that are not root's", uid, gid)
	}
	made := false
	for _, in := range final.All("RUN") {
		if strings.Contains(in.Args, fmt.Sprintf("groupadd --gid %d ", gid)) &&
			regexp.MustCompile(fmt.Sprintf(`useradd --uid %d --gid %d (.* )?--create-home `, uid, gid)).MatchString(in.Args) {
			made = true
		}
	}
	if !made {
		t.Errorf("no RUN of the runtime stage makes the group %d and the user %d with a home (groupadd --gid %d, useradd --uid %d --gid %d ... --create-home)",
			gid, uid, gid, uid, gid)
	}
	entry, err := final.Entrypoint()
	if err != nil {
		t.Fatal(err)
	}
	if entry[0] != "tpurun" {
		t.Errorf("ENTRYPOINT %q: want tpurun itself as PID 1", entry)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	mustDo(t, err)
	_, section, _ := strings.Cut(string(readme), "\n## Container entrypoint\n")
	section, _, _ = strings.Cut(section, "\n## ")
	m := regexp.MustCompile("`ENTRYPOINT (\\[[^`]*\\])`").FindStringSubmatch(section)
	var documented []string
	if m == nil || json.Unmarshal([]byte(m[1]), &documented) != nil || !slices.Equal(documented, entry) {
		t.Errorf("the README's Container entrypoint section says %q, the Dockerfile's ENTRYPOINT is %q", m, entry)
	}
	if !strings.Contains(section, fmt.Sprintf("as user %d, not root", uid)) {
		t.Errorf("the README's Container entrypoint section does not say the image runs as user %d, not root", uid)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
