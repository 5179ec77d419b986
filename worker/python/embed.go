// Package python holds the sources of the Python module tpurun (tpurun/*.py: the workers' Python client, function
// mode's runner and tpurun.spawn), embedded for the launcher, which installs them on the workers' PYTHONPATH; a Go
// worker does not import it. The same directory is an installable Python project (`pip install worker/python`
// works offline). It offers the files only, not their installation.
package python

import "embed"

// Files holds the module's files as tpurun/<name>.py.
//
//go:embed tpurun/*.py
var Files embed.FS
