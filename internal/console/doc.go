// Package console owns what the launcher writes for people and reads from its workers: a Console is one output
// file (stdout or stderr) with one writer goroutine, so lines of different workers, of both streams and of tpurun's
// own log never splice and a slow reader slows the workers instead of losing their lines; a Forwarder copies one
// stream of one worker to it, whole lines with the worker's prefix (Prefix), raw bytes to its log file and the last
// ones into a Tail; the workers' pipes are made (Pipe) and read to their end, bounded once the workers are gone
// (Drain). Std, StdSpec and StdinMode say which streams go where and which workers read stdin.
package console
