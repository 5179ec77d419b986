// Package failure owns the errors a job ends with and the one mapping from them to tpurun's exit code: a typed
// error for each fact — a worker that failed (WorkerError), another node's verdict (NodeError), a stop signal
// (SignalError), a setting that is wrong (ConfigError), a program that cannot run (ProgramError), an output that
// cannot be written (OutputError), results that break the contract (ResultsError, ReplicaError, ResultError), a
// job that closed before this node came (JobClosedError) — and sentinels to branch on with errors.Is. ExitCode maps
// any of them, bare or wrapped, to a code of package exitcode's table: an error that carries its code says so with
// an ExitStatus method (as the launcher's Verdict does); the rest map by their sentinel.
package failure
