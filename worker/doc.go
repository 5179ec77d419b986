// Package worker owns the worker side of tpurun's contract: the wire format of the result channel, the Decoder
// the launcher's collector (package results) reads it with, and a Go client (Report, Fail, or Open a Client). The
// stdlib-only Python module that implements the same contract and xmp.spawn's function mode lives beside it
// (python/, an installable Python project: `pip install worker/python` works offline, `tpurun --python-path`
// prints where the launcher installs it); the launcher installs it, not this package, so a Go worker carries no
// Python.
//
// A worker finds its channel in TPURUN_RESULT_FD (an inherited pipe, fd 3) and the replicas it owns in
// TPURUN_REPLICAS ("0" or "0,1"). It writes frames; each is a 16-byte header followed by a payload:
//
//	offset size field
//	0      4    magic    "TPRF"
//	4      1    version  1
//	5      1    kind     1 result, 2 error, 3 hello
//	6      1    encoding 1 json, 2 pickle
//	7      1    reserved 0
//	8      4    replica  uint32 big-endian, at most 2^31-1
//	12     4    length   uint32 big-endian payload size (the launcher's limit is 64 MiB by default)
//
// An error payload is JSON {"type", "message", "traceback"}. Exactly one result or error per replica,
// world-wide. PROTOCOL.md in this directory is the full specification.
//
// TPURUN_RESULT_ID is the identity (st_dev:st_ino, ChannelID) of the pipe: both clients refuse a descriptor that
// is not that pipe, so a program started by a worker, which inherits the variables but not the channel, never
// writes frames into whatever file it holds at that number. Opening the channel marks it close-on-exec, so
// programs a worker starts never inherit it.
package worker
