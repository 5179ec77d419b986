// Package worker owns the worker side of tpurun's contract: the wire format of the result channel, a Go client
// (Report, Fail) and the stdlib-only Python module that implements the same contract and xmp.spawn's function mode.
package worker
