// Package rendezvous owns multi-host agreement: which node is 0..N-1, their addresses, ports and run id, decided
// exactly once per generation; barriers; world-wide results; and failure spreading from any node to all.
//
// # Use
//
//	r, err := rendezvous.New(ctx, rendezvous.Config{Backend: "tcp", Endpoint: "10.0.0.2:29400", NNodes: 4,
//		NodeRank: -1, Token: tok, Timeout: time.Minute, Logger: log})
//	defer r.Close()
//	s, err := r.Join(ctx, rendezvous.Member{Instance: rendezvous.NewInstance(), Host: host, Addr: ip,
//		LocalWorkers: 4, Accelerator: "v4-32", Generation: restart, Rank: -1})
//	a := s.Assignment()          // node rank, ordered nodes, world size, node 0's address and ports
//	go func() { for f := range s.Failures() { stop(f) } }()
//	s.Fail(ctx, rendezvous.Failure{WorkerRank: 5, Reason: "exit 1"})   // reaches every other node at once
//	s.Publish(ctx, "results", doc); all, err := s.Gather(ctx, "results")
//	s.Leave(ctx); s.Close()
//
// A restart (--max-restarts) joins again with Generation+1 on the same Rendezvous.
//
// # Backends
//
//   - static: node rank and host list from Config or the environment (TPU_WORKER_ID + TPU_WORKER_HOSTNAMES,
//     SLURM_NODEID + SLURM_JOB_NODELIST with bracket ranges, JOB_COMPLETION_INDEX). Node 0 hosts the embedded
//     server on host 0 (port --rdzv-conf port=, default 29400) for barriers, results and failures.
//   - tcp: the embedded server on --rdzv-endpoint. With is_host=auto (default) the node that can bind the endpoint
//     hosts it and the others connect; is_host=true/false forces it. Without an endpoint, several nodes need a host
//     list naming every node (its first host is the endpoint, on port=, default 29400); one node uses loopback.
//   - etcd: a real etcd v3 cluster (--rdzv-endpoint host:2379[,host:2379...]). Keys live under
//     <prefix><run id>/<generation>/ (prefix default /tpurun/rdzv/): "open" marks the generation's start;
//     hosts/<host> and ranks/<r> are claimed by transactions; members/<instance> registers a node; all three,
//     and barriers/<name>/<rank>, are tied to a lease of Heartbeat seconds kept alive by the node, so a dead node's
//     keys vanish and every node reports it lost. data/<key>/<rank> (results), failures/<rank> and
//     left/<instance> have no lease: results outlive their node. Every node replays the generation's history from
//     "open", and the world is the first NNodes registrations in revision order, so all nodes compute the same
//     ranks and the same verdict without a leader.
//
// # Exactly once and agreement
//
// A node joins once per generation. A second join by the same instance is idempotent (same assignment; on the
// embedded server the old connection is replaced without being reported lost). A different instance claiming the
// host name or node rank of a live node gets ErrDuplicateNode naming both. When all NNodes nodes are in, their run
// id, accelerator type, workers per node and slice count must agree: otherwise every node gets ErrMismatch naming
// the odd nodes (those differing from the most common value). Ranks: requested ranks are kept; the others fill the
// free ranks by slice, then arrival. Node 0's Ports (MASTER_PORT, coordinator, MegaScale) are shared with all.
// Join is bounded by Config.Timeout from the first arrival: ErrMissingNodes (which also matches ErrTimeout) names
// the ranks, and hosts when a host list is known, that never arrived. All timeouts use the monotonic clock.
//
// # Failures
//
// Fail is pushed by the server (or the etcd watch) to every other node at once. A node whose connection drops, or
// that sends nothing for Heartbeat (clients ping every Heartbeat/3), or whose etcd lease expires, is reported on
// every other node's Failures with Lost set, naming it; barriers and gathers waiting for it fail with ErrNodeLost.
// If the server itself goes (node 0 killed), every pending call fails with ErrServerLost and Failures reports it.
// Leave first, and a node's departure is not a failure.
//
// # Wire protocol (embedded server), version 1
//
// TCP, one connection per node per generation. Each message is a frame: a 4-byte big-endian length, then that
// many bytes of one JSON object, at most MaxMessage bytes (default 4 MiB; a larger length is refused before any
// allocation). Every object carries "v":1 and "type"; unknown fields, unknown types, other versions, trailing data
// and invalid values are protocol errors: the server answers {"type":"rejected","error":{...}} and hangs up.
//
//	client -> server: join {id, token, member, nnodes, hosts?, timeout_ms}; barrier {id, token, name, timeout_ms};
//	                  publish {id, token, name, data(base64)}; gather {id, token, name, timeout_ms};
//	                  fail {id, token, failure}; leave {id, token}; ping {token}
//	server -> client: reply {id, assignment? | gathered? | error?}; pong; failure {failure} (pushed);
//	                  rejected {error}
//	error: {"code": timeout|missing|duplicate|mismatch|bad_token|no_token|node_lost|server_lost|world_full|
//	        protocol|config|closed, "nodes": [{rank, host, instance}], "detail": "..."}
//
// # Security
//
// The server listens on loopback unless given another address; off loopback (including all interfaces) it
// refuses to start without a token (ErrNoToken). When it has a token, every message must carry it: it is compared
// with crypto/subtle in constant time, a wrong one is answered with ErrBadToken and the connection closed, and it
// is never logged. Connections are bounded (MaxConns; more are refused), a connection that sends nothing within
// HelloTimeout (5 s) is dropped, and a joined node silent for Heartbeat is dropped and reported lost. The etcd
// backend relies on etcd's own transport security and auth.
package rendezvous
