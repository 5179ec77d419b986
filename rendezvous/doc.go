// Package rendezvous owns multi-host agreement: which node is 0..N-1, their addresses, ports and run id, decided
// exactly once per generation; barriers; world-wide results; and failure spreading from any node to all.
package rendezvous
