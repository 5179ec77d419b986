package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fallbackTmp is where tpurun's own temporary files go when TMPDIR names no usable directory.
const fallbackTmp = "/tmp"

// ownTmpdir makes tpurun's own temporary files (error files, the Python module's fallback copy, log directories) go
// to /tmp when TMPDIR is not a directory tpurun can write in, as Python's tempfile (and so torchrun) falls back, and
// returns the warning to give then, else "". The workers' env, taken before, keeps the user's TMPDIR.
func ownTmpdir() (warning string) {
	d := os.Getenv("TMPDIR")
	if d == "" {
		return ""
	}
	err := usableDir(d)
	if err == nil {
		return ""
	}
	if serr := os.Setenv("TMPDIR", fallbackTmp); serr != nil {
		return ""
	}
	return fmt.Sprintf("TMPDIR=%s: %v; tpurun's own temporary files go to %s (the workers get TMPDIR as it is)", d, err, fallbackTmp)
}

// usableDir is nil when d is a directory this process can create files in.
func usableDir(d string) error {
	fi, err := os.Stat(d)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such directory")
	case err != nil:
		return err
	case !fi.IsDir():
		return errors.New("not a directory")
	}
	if err := unix.Access(d, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot create files in it: %w", err)
	}
	return nil
}
