// Package python holds the sources of the Python module tpurun (tpurun/*.py: the workers' Python client, function
// mode's runner and tpurun.spawn), embedded for the launcher, which installs them on the workers' PYTHONPATH. The
// same directory is an installable Python project (pyproject.toml: `pip install worker/python` works offline).
//
// A Go worker does not import it (package worker is the Go client, and carries no Python); it offers the files
// only, not their installation.
package python

import "embed"

// Files holds the module's files as tpurun/<name>.py.
//
//go:embed tpurun/*.py
var Files embed.FS
