// Package console owns what the launcher writes for people and reads from its workers. A Console is one output
// file (stdout or stderr) with one writer goroutine, so lines of different workers, of both streams and of tpurun's
// own log (NewLogger on LogWriter) never splice, and a slow reader slows the workers instead of losing their lines;
// a stop signal bounds how long it waits for that reader (Stop, Hurry). A Forwarder copies one stream of one worker
// to a console: the worker's bytes, or whole lines after the worker's prefix (Prefix); raw bytes to its log file and
// the last ones into a Tail. A worker's streams are pipes (Pipe) or a pseudo-terminal of its own (OpenPty), read to
// their end and bounded once the worker is gone (Drain). Std, StdSpec and StdinMode say which streams go where and
// which workers read stdin.
//
// It does not decide when a worker starts or stops, nor what a run's output means (its results, its report): it
// moves bytes and says when a file cannot be written.
package console
