// Package launcher owns the supervision of one run on one host: a Plan in, processes out. It starts one worker
// per planned rank with its environment, streams and prefixes their output, fails fast when one fails, forwards
// signals, restarts the group when asked, collects results and writes the exit report.
package launcher
