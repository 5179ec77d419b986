package dockertest_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tpurun/internal/testutil/dockertest"
)

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const sample = `# syntax comment
FROM golang:1.26 AS build
WORKDIR /src
# a comment between continuation lines is skipped, as Docker does
RUN echo a \
# skipped
    && echo b
COPY --from=other --chmod=755 x /y

from debian:bookworm-slim
USER 10001:10002
ENTRYPOINT ["tpurun", "--grace", "7s"]
ENTRYPOINT ["tpurun"]
CMD --nprocs 2
`

func TestParse(t *testing.T) {
	df, err := dockertest.Parse(strings.NewReader(sample))
	mustDo(t, err)
	if len(df.Stages) != 2 || df.Stage("build") == nil || df.Stage("build").Base != "golang:1.26" || df.Final().Base != "debian:bookworm-slim" {
		t.Fatalf("stages %+v", df.Stages)
	}
	b := df.Stage("build")
	if run := b.Last("RUN"); run == nil || run.Line != 5 || run.Args != "echo a     && echo b" {
		t.Errorf("RUN %+v, want line 5 with the continuation joined", run)
	}
	if cp := b.Last("COPY"); cp == nil || cp.Flags["from"] != "other" || cp.Flags["chmod"] != "755" || !slices.Equal(cp.Words(), []string{"x", "/y"}) {
		t.Errorf("COPY %+v", cp)
	}
	uid, gid, err := df.Final().User()
	if err != nil || uid != 10001 || gid != 10002 {
		t.Errorf("User() = %d, %d, %v", uid, gid, err)
	}
	if e, err := df.Final().Entrypoint(); err != nil || !slices.Equal(e, []string{"tpurun"}) {
		t.Errorf("Entrypoint() = %q, %v: want the last one", e, err)
	}
	if uid, gid, err := b.User(); err != nil || uid != 0 || gid != 0 {
		t.Errorf("a stage without USER: %d, %d, %v; want root", uid, gid, err)
	}
}

// TestParseRefuses: what the parser does not know, or what a check must not guess, is an error.
func TestParseRefuses(t *testing.T) {
	for _, df := range []string{
		"RUN true\n",                       // before FROM
		"FROM a\nADD x y\n",                // an instruction it does not know
		"FROM a\nRUN <<EOF\nx\nEOF\n",      // a heredoc
		"FROM a\nCOPY ${SRC} /x\n",         // a variable outside RUN
		"FROM a\nENTRYPOINT [\"tpurun\"\n", // a broken exec form
		"FROM a\nRUN echo \\\n",            // a continuation with nothing after
		"FROM a b c d\n",                   // FROM with words it does not know
		"# only comments\n",                // no FROM
		"FROM a\nARG V=1\n",                // ARG: variables are not supported
	} {
		if _, err := dockertest.Parse(strings.NewReader(df)); err == nil {
			t.Errorf("Parse(%q): no error", df)
		}
	}
	for df, what := range map[string]string{
		"FROM a\nENTRYPOINT tpurun --grace 7s\n": "shell form",
		"FROM a\n":                               "no ENTRYPOINT",
	} {
		f, err := dockertest.Parse(strings.NewReader(df))
		mustDo(t, err)
		if _, err := f.Final().Entrypoint(); err == nil {
			t.Errorf("Entrypoint of %q (%s): no error", df, what)
		}
	}
	for _, user := range []string{"tpurun", "10001", "tpurun:10001", "10001:tpurun"} {
		f, err := dockertest.Parse(strings.NewReader("FROM a\nUSER " + user + "\n"))
		mustDo(t, err)
		if _, _, err := f.Final().User(); err == nil {
			t.Errorf("USER %s: no error (want uid:gid, numbers)", user)
		}
	}
}

// TestSendContext: Docker's rules as .dockerignore files use them: a pattern from the root, **/ at any depth, a
// directory leaving out all it holds, and a ! pattern taking a file back from an excluded directory.
func TestSendContext(t *testing.T) {
	dir := t.TempDir()
	files := []string{"a.txt", "sub/a.txt", "build/out.bin", "build/keep.me", "deep/x/y.log", "y.log", "src/main.go"}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f))
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(f), 0o600))
	}
	mustDo(t, os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("# comment\n/a.txt\nbuild\n!build/keep.me\n**/*.log\n"), 0o644))
	dst := t.TempDir()
	sent, err := dockertest.SendContext(dir, dst)
	mustDo(t, err)
	slices.Sort(sent)
	if want := []string{".dockerignore", "build/keep.me", "src/main.go", "sub/a.txt"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %q, want %q", sent, want)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "build", "keep.me")); err != nil || string(b) != "build/keep.me" {
		t.Errorf("build/keep.me in the copy: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "build", "out.bin")); err == nil {
		t.Error("an excluded file was copied")
	}
}

// TestBuild: a build stage's steps on this machine: WORKDIR and COPY under the stage's root, ENV for RUN, a
// directory's contents copied, and a RUN that names a path of the image refused before any step runs.
func TestBuild(t *testing.T) {
	ctxDir := t.TempDir()
	for _, f := range []string{"go.mod", "pkg/a.go", "pkg/b.go"} {
		p := filepath.Join(ctxDir, filepath.FromSlash(f))
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(f), 0o644))
	}
	df, err := dockertest.Parse(strings.NewReader("FROM x AS build\nWORKDIR /src\nCOPY go.mod ./\nENV GREETING=hi\n" +
		"RUN test -f go.mod && ! test -e pkg && echo \"$GREETING\" > seen\nCOPY . .\nRUN ls pkg > listed\nWORKDIR out\nRUN pwd > ../where\n"))
	mustDo(t, err)
	root := t.TempDir()
	var log bytes.Buffer
	if err := df.Stage("build").Build(context.Background(), root, ctxDir, []string{"PATH=/usr/bin:/bin"}, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for f, want := range map[string]string{"src/seen": "hi\n", "src/listed": "a.go\nb.go\n", "src/where": filepath.Join(root, "src", "out") + "\n"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", f, b, err, want)
		}
	}
	df, err = dockertest.Parse(strings.NewReader("FROM x\nRUN touch marker\nRUN go build -o /out/tpurun .\n"))
	mustDo(t, err)
	root = t.TempDir()
	if err := df.Final().Build(context.Background(), root, ctxDir, []string{"PATH=/usr/bin:/bin"}, &log); err == nil || !strings.Contains(err.Error(), "/out/tpurun") {
		t.Errorf("a RUN writing /out/tpurun: err %v, want a refusal naming it", err)
	}
	if _, err := os.Stat(filepath.Join(root, "marker")); err == nil {
		t.Error("a step ran before the refusal")
	}
	df, err = dockertest.Parse(strings.NewReader("FROM x\nCOPY missing ./\n"))
	mustDo(t, err)
	if err := df.Final().Build(context.Background(), t.TempDir(), ctxDir, nil, &log); err == nil {
		t.Error("COPY of a file not in the context: no error")
	}
}
