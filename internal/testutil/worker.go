package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Path is a path under $FAKE_DIR.
func (w *Worker) Path(elem ...string) string {
	return filepath.Join(append([]string{w.Dir}, elem...)...)
}

// Ready marks this worker set up: $FAKE_DIR/ready/<rank> (WaitReady waits for these).
func (w *Worker) Ready() {
	if w.Dir != "" {
		_ = os.WriteFile(w.Path("ready", w.Rank), nil, 0o644)
	}
}

// AllReady marks this worker ready and waits until every rank of the world ($WORLD_SIZE) is, so that what it does
// next (fail, die) never races the other workers' set-up.
func (w *Worker) AllReady() {
	w.Ready()
	world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	waitEntries(w.Path("ready"), world)
}

// waitEntries polls until dir holds at least n entries. In a worker, not a test: it runs until the launcher
// stops it.
func waitEntries(dir string, n int) []os.DirEntry {
	pause := time.Millisecond
	for {
		if es, _ := os.ReadDir(dir); len(es) >= n {
			return es
		}
		time.Sleep(pause)
		pause = min(pause*2, 10*time.Millisecond)
	}
}

// waitFile polls until path exists. In a worker, not a test: it runs until the launcher stops it.
func waitFile(path string) {
	pause := time.Millisecond
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(pause)
		pause = min(pause*2, 10*time.Millisecond)
	}
}

// Child prepares the test binary as a child of this worker doing spec (FAKE_VERB), with this worker's
// environment minus the entries that start with any of drop.
func (w *Worker) Child(spec string, drop ...string) *exec.Cmd {
	env := os.Environ()
	for _, p := range drop {
		env = Without(env, p)
	}
	c := exec.Command(Executable())
	c.Env = append(env, EnvVerb+"="+spec)
	return c
}

// fail reports a set-up error of the fake worker on stderr and returns code.
func fail(code int, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "fake worker: "+format+"\n", args...)
	return code
}

// WriteWhole writes data to path (under the worker's $FAKE_DIR) so that a reader sees all of it or no file: it is
// written in $FAKE_DIR/tmp and renamed into place. A test that sees a record exist reads it next; a record written
// in place can still be empty then (seen under load: a grandchild's pid read as "", the grandchild taken for a
// worker, a wait for it to exit that never ended).
func (w *Worker) WriteWhole(path string, data []byte) error {
	tmp := filepath.Join(w.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(tmp, filepath.Base(path))
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
