package dockertest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// Ignorer is a build context's .dockerignore, matched as Docker matches it.
type Ignorer struct {
	pm *patternmatcher.PatternMatcher
}

// Ignore reads dir/.dockerignore (no file: nothing is excluded).
func Ignore(dir string) (*Ignorer, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return &Ignorer{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return &Ignorer{pm: pm}, nil
}

// Excluded reports whether the context leaves out rel, a slash-separated path relative to the context's root: a
// pattern matches it or one of its parent directories, and no later ! pattern takes it back.
func (ig *Ignorer) Excluded(rel string) (bool, error) {
	if ig.pm == nil {
		return false, nil
	}
	return ig.pm.MatchesOrParentMatches(rel)
}

// SendContext copies into dst what a Docker client sends as the build context of dir: every directory, regular
// file and symbolic link that dir/.dockerignore does not exclude. It returns the files sent (slash-separated,
// relative to dir), in walk order. An excluded directory is not entered unless a ! pattern could take back
// something in it, as BuildKit's context transfer does.
func SendContext(dir, dst string) ([]string, error) {
	ig, err := Ignore(dir)
	if err != nil {
		return nil, err
	}
	var sent []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		out, err := ig.Excluded(rel)
		switch {
		case err != nil:
			return err
		case out && d.IsDir() && (ig.pm == nil || !ig.pm.Exclusions()):
			return filepath.SkipDir
		case out:
			return nil
		}
		if !d.IsDir() {
			sent = append(sent, rel)
		}
		return copyEntry(p, filepath.Join(dst, filepath.FromSlash(rel)), d)
	})
	return sent, err
}

// copyEntry copies one directory (made, not filled), regular file or symbolic link from src to dst; anything else
// (a socket, a device) is not part of a context.
func copyEntry(src, dst string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	if !d.IsDir() { // its directory may be excluded, the file taken back by a ! pattern
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
	}
	switch {
	case d.IsDir():
		return os.MkdirAll(dst, info.Mode().Perm()|0o700)
	case d.Type()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case d.Type().IsRegular():
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, info.Mode().Perm())
	}
	return nil
}
