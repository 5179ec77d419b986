package dockertest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Build runs the stage's steps in order as shell steps on this machine, as a build of the stage would:
//
//   - root stands for the stage's filesystem: WORKDIR /src is root/src, and so is every absolute path of WORKDIR
//     and of COPY's destination;
//   - COPY copies from buildContext (SendContext's copy of the context: what .dockerignore lets through) into
//     the working directory, as Docker does: a directory's contents, a file into a destination that ends in / or
//     is a directory, or onto a file name. COPY --from (another stage, an image) is not a build stage's step here:
//     an error;
//   - ENV adds to the environment of the RUN steps after it;
//   - RUN runs `sh -c ARGS` in the working directory with env (which must give what the FROM image would: the go
//     tool on PATH, HOME) and the stage's ENV. The image itself is not had, so a RUN that names an absolute path
//     (writes /out/tpurun, say) would reach this machine's own /: refused before anything runs.
//
// Each step's command and output go to log.
func (st *Stage) Build(ctx context.Context, root, buildContext string, env []string, log io.Writer) error {
	for _, in := range st.Instructions {
		if in.Cmd == "RUN" {
			if w := absoluteWord(in.Args); w != "" {
				return fmt.Errorf("line %d: RUN %s names %s, a path of the image: this machine's would be used", in.Line, in.Args, w)
			}
		}
	}
	b := &builder{root: root, context: buildContext, wd: "/", env: append([]string(nil), env...), log: log}
	for _, in := range st.Instructions {
		fmt.Fprintf(log, "#%d %s %s\n", in.Line, in.Cmd, in.Args)
		if err := b.step(ctx, in); err != nil {
			return fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, in.Args, err)
		}
	}
	return nil
}

// absoluteWord is the first word of a shell command line that is an absolute path, or that assigns one
// (A=/x, --out=/x), or "".
func absoluteWord(cmd string) string {
	for _, w := range strings.Fields(cmd) {
		if _, v, ok := strings.Cut(w, "="); ok {
			w = v
		}
		if strings.HasPrefix(strings.Trim(w, `"'`), "/") {
			return w
		}
	}
	return ""
}

// builder is Build's state between steps.
type builder struct {
	root, context string
	wd            string // the working directory, as the image names it
	env           []string
	log           io.Writer
}

// host is the path on this machine of the image's path p (relative to the working directory unless absolute).
func (b *builder) host(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(b.wd, p)
	}
	return filepath.Join(b.root, filepath.FromSlash(path.Clean(p)))
}

func (b *builder) step(ctx context.Context, in Instruction) error {
	switch in.Cmd {
	case "WORKDIR":
		b.wd = path.Join(b.wd, in.Args)
		return os.MkdirAll(b.host(b.wd), 0o755)
	case "ENV":
		k, v, ok := strings.Cut(in.Args, "=")
		if !ok || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("want ENV KEY=VALUE")
		}
		b.env = append(b.env, k+"="+strings.Trim(v, `"`))
		return nil
	case "COPY":
		return b.copy(in)
	case "RUN":
		if len(in.JSON) > 0 {
			return fmt.Errorf("RUN in exec form: not supported here")
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", in.Args)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = b.host(b.wd), b.env, b.log, b.log
		return cmd.Run()
	}
	return fmt.Errorf("not a step of a build stage here")
}

// copy is COPY SRC... DEST from the build context.
func (b *builder) copy(in Instruction) error {
	if len(in.Flags) > 0 {
		return fmt.Errorf("flags %v: a build stage here copies from the context only", in.Flags)
	}
	w := in.Words()
	if len(w) < 2 {
		return fmt.Errorf("want COPY SRC... DEST")
	}
	srcs, dest := w[:len(w)-1], w[len(w)-1]
	dst := b.host(dest)
	intoDir := strings.HasSuffix(dest, "/") || dest == "." || len(srcs) > 1
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		intoDir = true
	}
	for _, s := range srcs {
		if strings.ContainsAny(s, "*?[") {
			return fmt.Errorf("%s: wildcards are not supported here", s)
		}
		src := filepath.Join(b.context, filepath.FromSlash(path.Clean("/"+s)))
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%s is not in the build context (.dockerignore may leave it out): %w", s, err)
		}
		switch {
		case fi.IsDir():
			err = copyDir(src, dst)
		case intoDir:
			err = copyFile(src, filepath.Join(dst, fi.Name()), fi.Mode())
		default:
			err = copyFile(src, dst, fi.Mode())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyDir copies the contents of the directory src into dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return copyEntry(p, filepath.Join(dst, rel), d)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode.Perm())
}
