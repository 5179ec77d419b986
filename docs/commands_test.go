// Package docs holds the test that runs every command line of the docs as written (TestDocCommandsAsWritten).
// It is a package of its own so that its minutes of real launchers, torch workers and builds have a time budget of
// their own, apart from cmd/tpurun's.
package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// bin holds the built tpurun and hello.
var bin string

// repoRoot is the repository: docs/ is at its root.
var repoRoot = filepath.Join("..")

// TestMain builds tpurun and the hello example, as `make build` does, and runs the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tpurun-doc-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	if err := testutil.BuildStatic(dir, "tpurun/cmd/tpurun", "tpurun/examples/hello"); err != nil {
		fmt.Fprintln(os.Stderr, "the doc test builds tpurun with the go tool:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// refusedAddr is host:port of a TCP socket that is bound but not listening: connections are refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	mustDo(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	mustDo(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	mustDo(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// portBase returns a port p such that p..p+15 were free a moment ago (TPU process ports of a node).
func portBase(t *testing.T) int {
	t.Helper()
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000)
		ok := true
		for i := 0; i < 16 && ok; i++ {
			if l, err := net.Listen("tcp", fmt.Sprintf(":%d", p+i)); err != nil {
				ok = false
			} else {
				_ = l.Close()
			}
		}
		if ok {
			return p
		}
	}
	t.Fatal("no 16 consecutive free ports")
	return 0
}

// fakeV4Host is a fake /sys and /dev tree of a TPU v4 host with 4 chips: (sysfs root, dev root).
func fakeV4Host(t *testing.T) (string, string) {
	t.Helper()
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	for i := 0; i < 4; i++ {
		d := filepath.Join(sys, "bus", "pci", "devices", fmt.Sprintf("0000:00:%02x.0", i+4))
		mustDo(t, os.MkdirAll(d, 0o755))
		for f, v := range map[string]string{"vendor": "0x1ae0", "device": "0x005e", "class": "0x120000"} {
			mustDo(t, os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644))
		}
		mustDo(t, os.MkdirAll(dev, 0o755))
		mustDo(t, os.WriteFile(filepath.Join(dev, fmt.Sprintf("accel%d", i)), nil, 0o644))
	}
	return sys, dev
}

// The doc test below runs every command line of the docs as written: README.md and docs/*.md (fenced sh/bash/shell
// blocks and indented code blocks), `tpurun --help` and every `tpurun help TOPIC` (their indented command lines).
//
// It runs them in a copy of the repository (a git checkout of its own, the repository's history left out), from its
// root, in a shell whose PATH holds the built tpurun and hello in bin/ (as `make build` leaves them), the go tool
// and /usr/bin:/bin; HOME and pip's target are the test's own, the metadata server refuses connections. `train.py`,
// the docs' stand-in for the user's program, is a stub in the root that prints its rank and arguments. The lines
// of one block run in order in one shell (`set -e`), so an `export` or `cd` carries to the next line as at a
// prompt. At the end the checkout must show nothing new (`git status --porcelain`): what the commands write goes
// where they say, or is ignored by .gitignore, as it would be in a reader's checkout.
//
// A multi-host line (--nnodes N, or --rdzv-backend) runs as N launchers on loopback, one per node, each as a host
// of its own would run it: node addresses (10.0.0.2) become 127.0.0.1 and their ports free ones, `--node_rank=0`
// becomes each node's rank, etcd-0:2379 a real embedded etcd, $TOKEN a token, and every node has its own name
// (PET_NODE_NAME, as its hostname would be). A line that needs a TPU slice (static backend without --nnodes) gets a
// fake two-host v4-16 slice: a fake sysfs/dev tree per node and TPU_WORKER_ID / TPU_WORKER_HOSTNAMES.
//
// A line that cannot run here says so in the doc, where readers do not see it: an HTML comment on the line right
// before its fenced block, `<!-- not run by the doc test: `COMMAND`: REASON -->`, names the command (the line
// without its # comment); the test lists them and allows at most maxNotRun. A marker that names no command of the
// block after it fails the test. A synopsis (a line with [flags]) is not a command; the test lists those too.

// notRunMark is the HTML comment that marks a command of the next block as not run: the command, the reason.
var notRunMark = regexp.MustCompile("^<!-- not run by the doc test: `([^`]+)`: (.+) -->$")

// shellComment is a shell comment at the end of a command line.
var shellComment = regexp.MustCompile(`\s+#.*$`)

const maxNotRun = 3

type docLineKind int

const (
	lineRun       docLineKind = iota
	lineSynopsis              // "tpurun [flags] ...": the shape of a command, not one
	lineNotRun                // named by a notRunMark
	lineMultiHost             // one launcher per node
)

// docLine is one command line of a doc, continuation lines joined.
type docLine struct {
	where string // file:line, or `tpurun help TOPIC`:line
	text  string
	kind  docLineKind
	why   string // lineNotRun: the reason its notRunMark gives
}

// docBlock is the command lines of one code block, in order.
type docBlock struct {
	where  string
	lines  []docLine
	notRun map[string]*notRun // the commands its notRunMark names
}

// notRun is what a notRunMark says of a command, and whether the block had it.
type notRun struct {
	where, why string
	found      bool
}

var (
	shellFence  = regexp.MustCompile("^```(sh|bash|shell|console)\\s*$")
	helpCommand = regexp.MustCompile(`^\s{2,}((?:[A-Z_]+=\S+\s+)*(?:tpurun|export|pip|python3|cd|make)(?:\s.*)?)$`)
	helpComment = regexp.MustCompile(`^\s{2,}#`)
	nnodesFlag  = regexp.MustCompile(`--nnodes[= ](?:\d+:)?(\d+)`)
)

func classify(text string) docLineKind {
	switch {
	case strings.Contains(text, "[flags]"):
		return lineSynopsis
	case nnodesFlag.MatchString(text) && !strings.Contains(text, "--nnodes 1 ") || strings.Contains(text, "--rdzv-backend"):
		return lineMultiHost
	}
	return lineRun
}

// continues reports whether the block's last line ends with a backslash: the next line is part of it.
func (b *docBlock) continues() bool {
	return len(b.lines) > 0 && strings.HasSuffix(b.lines[len(b.lines)-1].text, "\\")
}

// addLine appends the command line text (a trailing backslash continues it on the next line) to b.
func (b *docBlock) addLine(where, text string) {
	if n := len(b.lines); n > 0 && strings.HasSuffix(b.lines[n-1].text, "\\") {
		last := &b.lines[n-1]
		last.text = strings.TrimRight(strings.TrimSuffix(last.text, "\\"), " \t") + " " + strings.TrimSpace(text)
		last.kind = classify(last.text)
		return
	}
	text = strings.TrimSpace(text)
	if text == "" || strings.HasPrefix(text, "#") {
		return
	}
	l := docLine{where: where, text: text, kind: classify(text)}
	if n := b.notRun[shellComment.ReplaceAllString(text, "")]; n != nil {
		l.kind, l.why, n.found = lineNotRun, n.why, true
	}
	b.lines = append(b.lines, l)
}

// markdownBlocks are the shell code blocks of a Markdown file: fenced sh/bash/shell/console blocks, and indented
// code blocks (four spaces after a blank line, outside a list). The error names every notRunMark that marks nothing.
func markdownBlocks(name string, text string) ([]docBlock, error) {
	m := &mdScan{cur: -1, prevBlank: true}
	for i, l := range strings.Split(text, "\n") {
		m.line(fmt.Sprintf("%s:%d", name, i+1), l)
	}
	m.mark(name+":end", "")
	return m.out, errors.Join(m.errs...)
}

// mdScan is markdownBlocks' state between lines.
type mdScan struct {
	out       []docBlock
	cur       int    // the block being filled, or -1
	fence     string // "" outside a fence, "shell" in a shell one, "other" in any other
	prevBlank bool
	inList    bool
	marks     map[string]*notRun // the notRunMarks of the line before, for the block that must start next
	errs      []error
}

// mark takes the notRunMark in l, if any; a mark not followed at once by a shell block's fence is an error.
func (m *mdScan) mark(where, l string) bool {
	if mk := notRunMark.FindStringSubmatch(l); mk != nil {
		if m.marks == nil {
			m.marks = map[string]*notRun{}
		}
		m.marks[mk[1]] = &notRun{where: where, why: mk[2]}
		return true
	}
	if m.marks != nil && !(m.fence == "" && shellFence.MatchString(l)) {
		for cmd, n := range m.marks {
			m.errs = append(m.errs, fmt.Errorf("%s: the mark not to run `%s` is not on the line right before a shell block", n.where, cmd))
		}
		m.marks = nil
	}
	return false
}

// closeBlock ends the fenced block being filled: a command its marks name that it does not have is an error.
func (m *mdScan) closeBlock() {
	if m.cur >= 0 {
		for cmd, n := range m.out[m.cur].notRun {
			if !n.found {
				m.errs = append(m.errs, fmt.Errorf("%s: marks `%s` not to run, but the block after it has no such command", n.where, cmd))
			}
		}
	}
	m.fence, m.cur = "", -1
}

func (m *mdScan) start(where string) {
	m.out = append(m.out, docBlock{where: where})
	m.cur = len(m.out) - 1
}

func (m *mdScan) line(where, l string) {
	if m.fence == "" && m.mark(where, l) {
		m.cur, m.prevBlank = -1, false
		return
	}
	if m.fence != "" {
		m.inFence(where, l)
	} else {
		m.outside(where, l)
	}
	blank := strings.TrimSpace(l) == ""
	if !blank && m.fence == "" {
		m.inList = strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* ") || (m.inList && strings.HasPrefix(l, "  "))
	}
	m.prevBlank = blank
}

func (m *mdScan) inFence(where, l string) {
	switch {
	case strings.HasPrefix(l, "```"):
		m.closeBlock()
	case m.fence == "shell" && strings.Contains(l, "not run by the doc test"): // would run: the suite in the suite
		m.errs = append(m.errs, fmt.Errorf("%s: a mark not to run in the line, which readers see: put it in a notRunMark", where))
	case m.fence == "shell":
		m.out[m.cur].addLine(where, l)
	}
}

func (m *mdScan) outside(where, l string) {
	switch {
	case strings.HasPrefix(l, "```"):
		m.fence, m.cur = "other", -1
		if shellFence.MatchString(l) {
			m.fence = "shell"
			m.start(where)
			m.out[m.cur].notRun, m.marks = m.marks, nil
		}
	case strings.HasPrefix(l, "    ") && !m.inList && (m.prevBlank || m.cur >= 0):
		if m.cur < 0 {
			m.start(where)
		}
		// An indented block may show output ("    tpurun: run ... attempt 0: ..."): only what reads as a
		// command (or continues one) is taken from it.
		if b := &m.out[m.cur]; helpCommand.MatchString(l) || b.continues() {
			b.addLine(where, l)
		}
	default:
		m.cur = -1
	}
}

// helpBlocks are the indented command lines of a help text, consecutive ones forming a block.
func helpBlocks(name, text string) []docBlock {
	var out []docBlock
	cur := -1
	for i, l := range strings.Split(text, "\n") {
		where := fmt.Sprintf("%s:%d", name, i+1)
		switch {
		case (cur >= 0 && out[cur].continues()) || helpCommand.MatchString(l):
			if cur < 0 {
				out = append(out, docBlock{where: where})
				cur = len(out) - 1
			}
			out[cur].addLine(where, l)
		case helpComment.MatchString(l):
		default:
			cur = -1
		}
	}
	return out
}

// allDocBlocks collects the blocks of every source the test covers.
func allDocBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	mustDo(t, err)
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	var out []docBlock
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		mustDo(t, err)
		blocks, err := markdownBlocks(f, string(b))
		if err != nil {
			t.Error(err)
		}
		out = append(out, blocks...)
	}
	topics, err := filepath.Glob(filepath.Join(root, "cmd", "tpurun", "help", "*.txt"))
	mustDo(t, err)
	helps := [][]string{{"--help"}, {"help", "exit-codes"}}
	for _, p := range topics {
		helps = append(helps, []string{"help", strings.TrimSuffix(filepath.Base(p), ".txt")})
	}
	for _, args := range helps {
		out = append(out, helpBlocks("`tpurun "+strings.Join(args, " ")+"`", helpText(t, args...))...)
	}
	return out
}

func helpText(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tpurun %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// docSandbox is the copy of the repository and the shell environment the doc commands run in.
type docSandbox struct {
	root string
	env  []string
}

const trainStub = `"""train.py stands for the user's program in the docs' command lines: it prints what it was given."""
import os, sys
print("train.py: rank %s of %s, args %s" % (os.environ.get("RANK"), os.environ.get("WORLD_SIZE"), sys.argv[1:]))
`

func newDocSandbox(t *testing.T) *docSandbox {
	t.Helper()
	top := t.TempDir()
	sb := &docSandbox{root: filepath.Join(top, "tpurun")}
	src, err := filepath.Abs(repoRoot)
	mustDo(t, err)
	mustDo(t, copyTree(src, sb.root))
	mustDo(t, os.MkdirAll(filepath.Join(sb.root, "bin"), 0o755))
	for _, b := range []string{"tpurun", "tpurun-etcd", "hello"} {
		mustDo(t, copyFile(filepath.Join(bin, b), filepath.Join(sb.root, "bin", b), 0o755))
	}
	mustDo(t, os.WriteFile(filepath.Join(sb.root, "train.py"), []byte(trainStub), 0o644))
	goTool, err := exec.LookPath("go")
	mustDo(t, err)
	sb.env = []string{
		"PATH=" + strings.Join([]string{filepath.Join(sb.root, "bin"), filepath.Dir(goTool), "/usr/bin", "/bin"}, ":"),
		"HOME=" + filepath.Join(top, "home"), "TMPDIR=" + t.TempDir(), "GCE_METADATA_HOST=" + refusedAddr(t),
		"PIP_TARGET=" + filepath.Join(top, "site-packages"), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1",
		"TOKEN=doc-test-token", "GOPROXY=off",
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE"} { // the test's own build cache: make demo builds warm
		out, err := exec.Command(goTool, "env", k).Output()
		mustDo(t, err)
		sb.env = append(sb.env, k+"="+strings.TrimSpace(string(out)))
	}
	return sb
}

// copyTree copies the regular files and directories of src into dst, leaving out .git (a directory, or a
// worktree's file naming the repository's) and bin.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch {
		case d.IsDir() && (rel == ".git" || rel == "bin"):
			return filepath.SkipDir
		case rel == ".git":
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// git runs git in the sandbox, apart from the machine's git configuration.
func (sb *docSandbox) git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testutil.Need(t, "git"), args...)
	cmd.Dir = sb.root
	cmd.Env = append(append([]string(nil), sb.env...), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=doc test", "GIT_AUTHOR_EMAIL=doc@test", "GIT_COMMITTER_NAME=doc test", "GIT_COMMITTER_EMAIL=doc@test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// baseline makes the sandbox a git checkout of what it holds before any command runs (the repository's files, the
// train.py stub; bin/ is ignored by .gitignore), so that leftBehind can name what the commands leave.
func (sb *docSandbox) baseline(t *testing.T) {
	t.Helper()
	sb.git(t, "init", "-q")
	sb.git(t, "add", "-A")
	sb.git(t, "commit", "-q", "--no-gpg-sign", "-m", "the checkout before the docs' commands")
}

// leftBehind is what a reader who ran the docs' commands in a checkout would find there: `git status --porcelain`,
// untracked files one by one (what .gitignore ignores is not shown).
func (sb *docSandbox) leftBehind(t *testing.T) string {
	t.Helper()
	return sb.git(t, "status", "--porcelain", "--untracked-files=all")
}

// newLines records where each command line of b runs first and reports whether any of b's plain lines is new (a
// block whose lines all ran before, in the same order as a part of another block, is not run again).
func (sb *docSandbox) newLines(b docBlock, seen map[string]string) bool {
	fresh := false
	for _, l := range b.lines {
		if l.kind != lineRun && l.kind != lineMultiHost {
			continue
		}
		if _, ok := seen[l.text]; !ok {
			seen[l.text] = l.where
			fresh = fresh || l.kind == lineRun
		}
	}
	return fresh
}

// runScript runs the block's plain command lines in order in one shell, from the sandbox root.
func (sb *docSandbox) runScript(t *testing.T, b docBlock) {
	t.Helper()
	var script []string
	for _, l := range b.lines {
		if l.kind == lineRun {
			script = append(script, l.text)
		}
	}
	if len(script) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scaled(5*time.Minute))
	defer cancel()
	cmd := docShell(ctx, sb.root, sb.env, "-e", "-x", "-c", strings.Join(script, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: the lines\n  %s\nfailed as written (%v): %v\n%s", b.where, strings.Join(script, "\n  "), ctx.Err(), err, lastLines(out, 60))
	}
}

// docShell is `sh ARGS...` in its own process group, killed whole (the launchers it started too) when ctx ends.
func docShell(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func lastLines(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = append([]string{"..."}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}

// nodeLines turns a multi-host line into each node's line and extra environment (see the comment above).
func (sb *docSandbox) nodeLines(t *testing.T, line string, etcd func() string) ([]string, [][]string) {
	t.Helper()
	n, tpu := 2, false
	if m := nnodesFlag.FindStringSubmatch(line); m != nil {
		n, _ = strconv.Atoi(m[1])
	} else {
		tpu = true // the static backend told who is who by the TPU slice's own variables
	}
	addr := regexp.MustCompile(`10\.0\.0\.2(:\d+)?`)
	port := strconv.Itoa(portBase(t)) // a free run of ports: the static backend's server takes master_port+1
	line = addr.ReplaceAllStringFunc(line, func(m string) string {
		if strings.Contains(m, ":") {
			return "127.0.0.1:" + port
		}
		return "127.0.0.1"
	})
	line = regexp.MustCompile(`--master_port=\d+`).ReplaceAllString(line, "--master_port="+strconv.Itoa(portBase(t)))
	if strings.Contains(line, "etcd-0:2379") {
		line = strings.ReplaceAll(line, "etcd-0:2379", strings.TrimPrefix(etcd(), "http://"))
	}
	var lines []string
	var envs [][]string
	base := portBase(t)
	for k := 0; k < n; k++ {
		lines = append(lines, regexp.MustCompile(`--node_rank=0\b`).ReplaceAllString(line, "--node_rank="+strconv.Itoa(k)))
		env := []string{"PET_NODE_NAME=node" + strconv.Itoa(k)}
		if tpu {
			sys, dev := fakeV4Host(t)
			env = []string{"TPURUN_SYSFS_ROOT=" + sys, "TPURUN_DEV_ROOT=" + dev, "TPU_ACCELERATOR_TYPE=v4-16",
				"TPU_WORKER_ID=" + strconv.Itoa(k), "TPU_WORKER_HOSTNAMES=127.0.0.1,127.0.0.2",
				"PET_RDZV_CONF=port=" + port, "PET_TPU_PORT_BASE=" + strconv.Itoa(base)}
		}
		envs = append(envs, env)
	}
	return lines, envs
}

// runNodes runs a multi-host line as one launcher per node on loopback; every node must exit 0.
func (sb *docSandbox) runNodes(t *testing.T, l docLine, etcd func() string) {
	t.Helper()
	lines, envs := sb.nodeLines(t, l.text, etcd)
	type done struct {
		k   int
		out []byte
		err error
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scaled(2*time.Minute))
	defer cancel()
	ch := make(chan done, len(lines))
	for k := range lines {
		var out bytes.Buffer
		cmd := docShell(ctx, sb.root, append(append([]string(nil), sb.env...), envs[k]...), "-e", "-c", lines[k])
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := cmd.Wait()
			ch <- done{k, out.Bytes(), err}
		}()
	}
	for range lines {
		if d := <-ch; d.err != nil {
			t.Errorf("%s: node %d of %d ran\n  %s\nand failed (%v): %v\n%s", l.where, d.k, len(lines), lines[d.k], ctx.Err(), d.err, lastLines(d.out, 40))
		}
	}
}

// TestDocCommandsAsWritten runs every command line of README.md, docs/*.md, `tpurun --help` and every
// `tpurun help TOPIC` as written (see the comment above for the sandbox and the loopback nodes).
func TestDocCommandsAsWritten(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "python3")
	testutil.Need(t, "torch")   // the README's torch example
	testutil.Need(t, "jupyter") // the README's notebook line
	sb := newDocSandbox(t)
	sb.baseline(t)
	blocks := allDocBlocks(t, sb.root)
	var notRun, synopses []string
	// The etcd the etcd line runs against; starting it takes the heavy-test slot (testutil.Heavy) for the whole
	// test, which is one: minutes of launchers, nodes, torch workers and a build.
	etcdEP := etcdtest.StartOne(t)
	etcd := func() string { return etcdEP }
	var ran []string
	seen := map[string]string{} // a command line run already (the same line in two docs runs once) -> where
	for _, b := range blocks {
		if sb.newLines(b, seen) {
			sb.runScript(t, b)
		}
		for _, l := range b.lines {
			switch {
			case l.kind == lineNotRun:
				notRun = append(notRun, l.where+": "+l.text+"   ("+l.why+")")
			case l.kind == lineSynopsis:
				synopses = append(synopses, l.where+": "+l.text)
			case seen[l.text] != l.where:
				ran = append(ran, l.where+": "+l.text+"   (as at "+seen[l.text]+")")
			case l.kind == lineMultiHost:
				sb.runNodes(t, l, etcd)
				ran = append(ran, l.where+": "+l.text+"   (one launcher per node)")
			default:
				ran = append(ran, l.where+": "+l.text)
			}
		}
	}
	t.Logf("ran %d command lines of %d blocks:\n  %s", len(ran), len(blocks), strings.Join(ran, "\n  "))
	t.Logf("synopses (not commands):\n  %s", strings.Join(synopses, "\n  "))
	t.Logf("not run by this test (marked <!-- not run by the doc test: ... -->):\n  %s", strings.Join(notRun, "\n  "))
	if len(notRun) > maxNotRun {
		t.Errorf("%d doc commands are marked not to run; at most %d may be: make them run here", len(notRun), maxNotRun)
	}
	if len(ran) < 15 {
		t.Errorf("only %d command lines found: the extraction lost some", len(ran))
	}
	if left := sb.leftBehind(t); left != "" {
		t.Errorf("the docs' commands leave this in the checkout (git status --porcelain):\n%s"+
			"write it where the command says (a temporary directory), or ignore it in .gitignore", left)
	}
}

// TestDocExtraction: what the doc test takes from Markdown and help texts as command lines, and how it sorts them.
func TestDocExtraction(t *testing.T) {
	t.Parallel()
	md := "intro\n<!-- not run by the doc test: `make test`: why -->\n```sh\ntpurun a \\\n  --b c   # comment\n# only a comment\n" +
		"make test  # the suite\nmake tests\n```\n" +
		"```go\nspec := x\n```\n\n    tpurun --nnodes 2:4 d\n    tpurun [flags] PROGRAM\n\n- a list\n\n    not code: in the list\n\nend\n" +
		"\n    tpurun: run 7f3a attempt 0: output, not a command\n"
	blocks, err := markdownBlocks("m.md", md)
	if err != nil {
		t.Errorf("markdown: %v", err)
	}
	var got []string
	for _, b := range blocks {
		for _, l := range b.lines {
			got = append(got, fmt.Sprintf("%s %d %s", l.where, l.kind, l.text))
		}
	}
	want := []string{"m.md:4 0 tpurun a --b c   # comment", "m.md:7 2 make test  # the suite", "m.md:8 0 make tests",
		"m.md:14 3 tpurun --nnodes 2:4 d", "m.md:15 1 tpurun [flags] PROGRAM"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("markdown:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A mark that marks nothing fails: a command the block lacks, a mark not right before the block, one at the end.
	for md, want := range map[string]string{
		"<!-- not run by the doc test: `make tst`: why -->\n```sh\nmake test\n```\n":    "m.md:1: marks `make tst` not to run, but the block after it has no such command",
		"<!-- not run by the doc test: `make test`: why -->\n\n```sh\nmake test\n```\n": "m.md:1: the mark not to run `make test` is not on the line right before a shell block",
		"<!-- not run by the doc test: `make test`: why -->\n```text\nmake test\n```\n": "m.md:1: the mark not to run `make test` is not on the line right before a shell block",
		"x\n<!-- not run by the doc test: `make test`: why -->":                         "m.md:2: the mark not to run `make test` is not on the line right before a shell block",
		"```sh\nmake test  # [not run by the doc test: why]\n```\n":                     "m.md:2: a mark not to run in the line, which readers see: put it in a notRunMark",
	} {
		if _, err := markdownBlocks("m.md", md); err == nil || err.Error() != want {
			t.Errorf("markdown %q: error %v, want %q", md, err, want)
		}
	}
	help := "Usage:\n  tpurun [flags] X\n\n  # a comment\n  tpurun --rdzv-backend static \\\n         -- python3 t.py\n  tpurun.report(value)   # Python\n" +
		"  export A=$(b)\n  --nprocs int   a flag\n"
	got = nil
	for _, b := range helpBlocks("h", help) {
		got = append(got, b.where)
		for _, l := range b.lines {
			got = append(got, fmt.Sprintf("%d %s", l.kind, l.text))
		}
	}
	want = []string{"h:2", "1 tpurun [flags] X", "h:5", "3 tpurun --rdzv-backend static -- python3 t.py", "h:8", "0 export A=$(b)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("help:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
