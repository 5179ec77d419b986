// Package agree is the kit the rendezvous backends share (tpurun/rendezvous/tcp, static and etcd), importable by
// them and by no program outside tpurun/rendezvous. It offers the agreement of a world from its members: ranks
// (AssignRanks), the settings every node must share (Agree, Disagreement), the world laid out and each node's
// share of it (AgreeWorld, Agreed), encoded once for a server's replies (Shares, SliceTable, NameFrom) and the sum
// of a host list a join carries instead of the list (HostsSum); the errors a backend returns, which are package
// rendezvous's (NewError, ConfigError, StoreLost, Missing), and their form on a wire or in a store (WireError);
// and the check of a host:port endpoint (SplitEndpoint).
//
// It owns no protocol, connection or store (the backends do), and nothing a program calls: that is package
// rendezvous, which imports no backend and not this kit.
package agree
