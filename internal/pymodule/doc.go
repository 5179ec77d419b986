// Package pymodule installs the Python module tpurun (its sources are package tpurun/worker/python) for the
// workers: Path installs it once per version and binary into the user's cache (or a given directory), checked
// against planted links and other users, and returns the directory for PYTHONPATH (given a private directory, a
// private copy); Version is the module's version, the one `tpurun --version` prints.
//
// It is the launcher's side: the result channel's wire format and the Go client are package worker's, and the
// preloaded interpreter's own Python is package preload's.
package pymodule
