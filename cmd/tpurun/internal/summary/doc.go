// Package summary owns how a job's outcome is shown: each attempt's per-rank exit summary with its verdict and
// root cause (the program, the failing rank's last stderr lines, its traceback), as text for people or as one log
// record for machines (--log-format json); a Printer prints each attempt as it ends (a spec.Observer); and what
// a results document says went wrong (WriteResults).
package summary
