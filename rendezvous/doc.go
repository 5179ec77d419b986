// Package rendezvous is how the launchers of a multi-host job meet. Each opens a Rendezvous on a backend (New, from
// a Config that follows torchrun's flags), joins a generation with what its node brings (Rendezvous.Join, a Member)
// and gets a Session: the agreed world, decided exactly once per generation (Assignment: which node is 0..N-1,
// their addresses, node 0's ports, the run id, every node's workers), barriers, an exchange of data (Publish,
// Gather), failures spread from any node to all (Fail, Failures), the nodes waiting for the next generation, and
// the close of the job (Finish). An elastic world (Config.MinNodes) forms from the nodes that arrive within a last
// call; a node that comes late or comes back joins LatestGeneration; a lost node is an error naming it. A restart
// joins again with Generation+1 on the same Rendezvous. The errors a caller branches on are sentinels matched with
// errors.Is (ErrTimeout, ErrMismatch, ErrConfig, ErrNodeLost, ...) and typed errors read with errors.As (*Error,
// *MismatchError, *NodeLostError, *JobClosedError). ParseConf and CheckConf read torchrun's --rdzv-conf options.
//
// The backends are packages of their own, which a program imports to link them; each registers itself (Register)
// under its name and torchrun's aliases: tpurun/rendezvous/static, tpurun/rendezvous/tcp (alias c10d) and
// tpurun/rendezvous/etcd (alias etcd-v2). Backend "" is the world of one, this node alone, and needs none:
//
//	import _ "tpurun/rendezvous/tcp" // registers "tcp" and "c10d"
//
// A backend the program did not link is an ErrConfig error naming the package to import. Lookup finds a backend
// by name, and a caller decides by its capabilities (Solo, Elastic, NeedsHosts), never by its name.
//
// This package does not own the backends' protocols, servers or stores (their packages: this one imports none of
// them), what a launcher does with the world (its workers' ranks and environment: tpurun/launcher), nor the
// environment: it reads none (the launcher's detection reads TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST and the like
// and passes Config.Hosts). The rest of this comment is the design every backend follows.
//
// # Lifecycle of a job
//
// A job (its run id) goes through the same states on every backend:
//
//	forming (g)  --the world is agreed-->            running (g)
//	running (g)  --its verdict restarts-->           forming (g+1)
//	running (g)  --its verdict ends the job-->       closing
//	closing      --the first Finish-->               closed (g, exit code)
//	closed       --linger after the last node-->     gone: the run id is free
//
// The states, who moves the job on, and what each node sees:
//
//   - forming (generation g): nodes join; the world is agreed when NNodes are in, or when MinNodes are in and the
//     last call is over. Moved on by the store: the embedded server, or on etcd the node holding the first
//     registration key, which counts the registrations and writes the world once. A node sees Join block; nodes
//     that disagree on a setting every node must share (the node count or range, run id, accelerator type, workers
//     per node, slice count) all get a *MismatchError at once, naming the setting, each value and the nodes that
//     gave it.
//   - running (g): the world's nodes meet at barriers, exchange data and failures, and agree on a verdict. A
//     node that arrives now (LatestGeneration: a late elastic node, a replacement) waits in forming (g+1); the
//     world sees it in Session.Waiting. A verdict that restarts moves the job to forming (g+1), by the nodes
//     joining it.
//   - closing: the verdict is agreed and no restart follows. The final world's nodes still finish their calls
//     (read the verdict, publish, leave); nodes waiting in g+1 still wait.
//   - closed (g, exit code): recorded by the first Session.Finish of a node of the final world (every node of it
//     calls Finish before Leave; the later calls find it recorded). Every node waiting for a later generation gets
//     a *JobClosedError ("job <id> already finished (generation g, exit c)") at once, and so does every node that
//     joins while the record lasts: a launcher exits 0 on it when it took no part in the job.
//   - gone: the record lasts until linger (option linger, default one heartbeat) after the job's last node let
//     go. tcp: node 0's server answers with it while nodes are still connected, for at most linger, then stops
//     (a node that comes later cannot reach it: ErrTimeout after the join timeout). etcd: every key of the job is
//     tied to the job's lease, which every node keeps alive from its first join until Rendezvous.Close; linger
//     (SilentBeats heartbeats at least, as a node's lease) after the last one stops, or dies, they vanish. Then the run id is free: a job started with it begins
//     again at generation 0.
//
// "Later", for a reused run id, is a matter of the store's state, not of intent: a node belongs to the job open
// under its run id when it joins. A node of a finished job that arrives once a new job has begun under the same
// run id is a node of the new one (it joins its forming generation, or waits for its next); one that arrives
// while the old job's record lasts is told that job finished, even if it meant to start a new one (it says so:
// wait linger, or use another run id). A job that dies without closing (every launcher killed) leaves no record:
// on etcd its keys vanish linger after its last lease lapsed.
//
// Every wait of a node also watches the store: a store lost (node 0's server gone; etcd unreachable, seen as a
// lease renewal unanswered for its TTL with no connection to etcd, or a broken watch) ends every call and join of the session
// with an error matching ErrStoreLost that names the endpoint (an *Error with Field "rendezvous endpoint"), closes
// Session.Done and is reported on Failures, within about four heartbeats.
//
// # Elastic worlds and lost nodes
//
// With Config.MinNodes < NNodes (tcp, etcd), a join completes at once when NNodes nodes are in, or LastCall
// (default 30 s, torchrun's last_call_timeout) after MinNodes are in, with those present; the join timeout also
// ends it when MinNodes are in. Requested node ranks must be below MinNodes. A node that disappears is reported
// on every Failures channel (Lost set), and a barrier or gather that needs it fails with a *NodeLostError
// (errors.Is ErrNodeLost) naming it and the generation: the survivors may join Generation+1 and continue with
// at least MinNodes. A node that starts late, or comes back, joins with Generation LatestGeneration: it enters
// the generation being formed, or, when the latest one is complete, waits in the next one; Session.Waiting tells
// the running world how many wait, so it can restart to take them in.
//
// # Backends
//
//   - static: node rank and host list from Config (the package reads no environment: the launcher's detection
//     reads TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST and the like once and passes them). Node 0 hosts the embedded
//     server on host 0 (option port, default 29400) for barriers, results and failures. Fixed size only.
//   - tcp: the embedded server on the endpoint. With is_host=auto (default) the node that can bind the endpoint
//     hosts it and the others connect; is_host=true/false forces it. Without an endpoint, several nodes need a host
//     list (Config.Hosts) naming every node (its first host is the endpoint, on option port, default 29400); one node uses
//     loopback.
//   - etcd: a real etcd v3 cluster (endpoint host:2379[,host:2379...]). Keys live under <prefix><run id>/ (prefix
//     default /tpurun/rdzv/): "job" names the open job instance and its lease (created by a transaction by the
//     first node; see the lifecycle); the instance's keys are under <job>/: "latest" holds the highest
//     generation opened (zero-padded), "closed" how the job ended; a generation's keys are under <generation>/:
//     "open" marks its start and holds the size range its first node asked for (a node asking for another fails
//     the generation); hosts/<host> and ranks/<r> are claimed by transactions; members/<instance> registers a
//     node (and the size range it asks for); all three, and barriers/<name>/<rank>, are tied to the node's lease,
//     whose TTL is SilentBeats (3) heartbeats (renewed every heartbeat), so a dead node's keys vanish and every node
//     reports it lost; Leave ties the node's registration to the job's lease, and its departure then goes
//     unreported; arrived/<instance> records on the job's lease that a node registered (a join that times out
//     names who never did). No node hears every other: the node holding the first registration key (the lowest instance)
//     counts the registrations (it watches members/; each other node watches one key, the first it knows of, to
//     take over when it vanishes) and, when NNodes are in (or MinNodes when its last call ends), assigns the
//     ranks, checks the agreement and writes the outcome once, by a transaction: all/world, the world's
//     registrations by column and their ranks (in chunks, world/<proposer>/<i>, past 1 MiB), or the error every
//     node gets. Every node watches all/: the world, all/done/<kind>/<name> (written by the arrival that
//     completes a barrier or gather: each arrival's transaction counts them), all/failures/<rank> and
//     all/closed (a copy of the close for the nodes waiting in the next generation); once the world is agreed,
//     members/ for deletions only (lost nodes). data/<key>/<rank> (results), and every key of all/ and world/,
//     like "job", "latest" and "open", are tied to the job's lease: results outlive their node, not the job.
//   - "" (no backend): the world of one, this node alone. Nothing travels and nothing is checked against others:
//     every join agrees at once on the member as given.
//
// Each backend is a Backend in a package of its own, which registers it (Register) under its name and torchrun's
// aliases: rendezvous/static, rendezvous/tcp (the embedded server, its client, the wire format and handshake,
// shared with static) and rendezvous/etcd. A program links the backends it imports. This package holds the API,
// the configuration and the errors; the agreement core the backends share (ranks, the checks, the world laid out
// and each node's share) is a package of theirs that a program cannot import. New opens the backend once, and
// every backend's joins return the one Session interface.
//
// # Exactly once and agreement
//
// A node joins once per generation. A second join by the same instance is idempotent (same assignment; on the
// embedded server the old connection is replaced without being reported lost). A different instance claiming the
// host name or node rank of a live node gets ErrDuplicateNode naming both. Every node must ask for the same size
// range (NNodes, MinNodes): a node asking for another one fails the join of every node of the generation at once,
// and one that would wait for the next generation of a running world of another size is refused at once. When
// the world is complete, its run id, accelerator type, workers per node and slice count must agree. A
// disagreement is a *MismatchError (errors.Is ErrMismatch) on every node, naming the setting, each value and
// the nodes that gave it (Odd: those differing from the most common value). Ranks: requested ranks are kept; the
// others fill the free ranks by slice, then arrival. Node 0's Ports (MASTER_PORT, coordinator, MegaScale) are shared with all. Join is
// bounded by Config.Timeout from the first arrival: ErrMissingNodes (which also matches ErrTimeout) names the
// ranks, and hosts when a host list is known, that never arrived. All timeouts use the monotonic clock.
//
// A node of another job is no member of the world: the embedded server (tcp, static) serves the run id the node
// hosting it joins with, from that node's first join, and refuses at once, alone, a node with another run id (a
// straggler of a restarted JobSet's previous attempt) with an ErrMismatch error naming both run ids (Field
// "rendezvous run id"), and a node asking for a generation the job left behind with ErrWorldFull: the world
// forms without it. On etcd each run id has keys of its own: the straggler waits alone, and its join's
// ErrMissingNodes names the run ids of the jobs open under the prefix beside its own.
//
// While a join waits, the node says so every progress_interval (option, default 5 s), one line at a time: the
// server (on the node hosting it) names who has arrived and who is missing, and every node that reached it says
// the same, as the server answers its waiting request (one that has not yet says so); on etcd the node counting
// the registrations names them, and the others count them. Each says how long its join will still wait.
//
// # Failures
//
// Fail is pushed by the server (or the etcd watch) to every other node at once. A node whose connection drops, or
// that sends nothing for SilentBeats (3) heartbeats (torch's keep-alive; clients ping every half heartbeat), or
// whose etcd lease expires (three heartbeats after its last renewal: a node busy for two is not lost), is reported on
// every other node's Failures with Lost set, naming it; barriers and gathers waiting for it fail with a
// *NodeLostError. If the store itself goes (node 0 killed, etcd down), every pending call fails with ErrStoreLost
// naming its endpoint, Session.Done is closed and Failures reports it. Leave first, and a node's departure is not
// a failure.
//
// Loss needs evidence (a connection closed: the process gone) or a silence long against the heartbeat. Silence is
// counted from the last byte received (a node counts the server's from its first ping left unanswered: a server
// owes nothing to a node whose own pings were late), and a node gives the embedded server SilentBeats+1 heartbeats
// (the one server of every node may stall longer than a node: a garbage collection of a large world, a loaded
// host). While a join is under way (the world forming: thousands of joins, a slice's table to send and read),
// neither side counts the other's silence: the join's timeout bounds the wait. A write that progresses is no
// stall, and a slice's table travels raw beside each share, encoded once (a slice's table: each host's name, address and instance, one per line). A side
// whose deadline finds the peer's bytes waiting reads on, and one that runs late (its process not scheduled, a
// loaded host; nodes report their lateness with their pings) gives the peer twice its lateness more, up to the
// limit again, before it declares the peer lost: a slow process is not a dead one, and a dead one is
// still lost within two limits.
//
// # Endpoint names
//
// An endpoint named by a host name that does not resolve yet (a pod is published in its headless service only as
// it starts) is waited for within the join timeout (Config.Timeout), with one log line: by the node that hosts the
// server on it, before it binds (New), and by a node dialling it (Join). A name that never resolves ends the wait
// with an ErrUnresolved error (which also matches ErrTimeout) naming the endpoint (Field "rendezvous endpoint")
// and how long it was tried. Config.Resolver replaces the resolver (tests).
//
// # Configuration errors
//
// New and Join check what they are given before anything is bound or sent: an endpoint that is not host:port,
// has a port out of range, or port 0 on a node that does not host the server; an endpoint or listen address off
// loopback without a token (ErrNoToken, which also matches ErrConfig); a run id ValidateRunID refuses; node
// counts, ranks, options and members. Each is an *Error matching ErrConfig whose Field (the setting: "rendezvous
// endpoint", "rendezvous run id", ...) and Value name the item; its message names the item in the package's words
// ("endpoint"), and a command line names the flag bound to the setting.
//
// # Wire protocol (embedded server), version 5
//
// TCP, one connection per node per generation. It opens with the handshake: a 40-byte hello from
// the client ("TPRZ", the version, a nonce), a 72-byte challenge from the server (its nonce and its proof of the
// token), the client's 32-byte proof, and a 4-byte verdict; proofs are HMAC-SHA256 of the nonces keyed by the
// token, so the token never crosses the wire and a node also knows the server holds it. Another version on
// either side is ErrVersion naming both versions (a version 1 peer, which has no handshake, is recognised and
// told so in its own framing). Then each message is a frame: a 4-byte big-endian length, then that many bytes of
// one JSON object, at most MaxMessage bytes (default 4 MiB; a larger length is refused before any allocation,
// and a body is allocated as it arrives, not as announced). Every object carries "v":5 and "type"; unknown
// fields, unknown types, other versions, trailing data and invalid values are protocol errors: the server answers
// {"type":"rejected","error":{...}} and hangs up.
//
// A waiting request sent while the node's join is under way is answered with extra {"progress": "..."}: the
// server's line of who has arrived and who is missing, which the node logs as its own progress line.
//
// A join carries the sum of the node's host list (hosts_sum: its length and CRC-32C), not the list: the server
// lays the shares out without names when every node's sum is that of the nodes' own names in rank order (a static
// world named by its host list), and each node names them from its list. The assignment in a join's reply is the
// node's share (Assignment): the server encodes what every node shares, and each slice's nodes, once per world,
// and writes each reply from those parts and the node's rank; a gather's reply, once per key. A frame is still one
// JSON object.
//
//	client -> server: join {id, member, nnodes, min_nodes?, last_call_ms?, hosts_sum?, timeout_ms}; barrier {id,
//	                  name, timeout_ms}; publish {id, name, data(base64)}; gather {id, name, timeout_ms}; fail {id,
//	                  failure}; leave {id}; waiting {id}; finish {id, exit_code}; ping {late_ms?}
//	server -> client: reply {id, assignment? | gathered? | waiting? | extra? | error?}; pong; failure {failure} (pushed);
//	                  rejected {error}
//	error: {"code": timeout|missing|duplicate|mismatch|bad_token|no_token|node_lost|server_lost|world_full|
//	        protocol|version|config|closed|job_closed, "nodes": [{rank, host, instance}], "field", "value",
//	        "generation", "run_id", "exit_code", "values": [{value, nodes}] (mismatch), "detail": "..."}
//
// # Security
//
// The server listens on loopback unless given another address; off loopback (including all interfaces) it
// refuses to start without a token (ErrNoToken), and a node refuses to connect to an off-loopback endpoint
// without one. A connection is served only after the handshake, which the server reads with fixed buffers under
// AuthTimeout (default 5 s): a peer without the token costs it a few bytes and a goroutine, never a message
// buffer. Connections still in the handshake are capped separately (MaxUnauth, default 64): a new one evicts the
// oldest that has not begun a handshake once it has had a grace of AuthTimeout/4 (at most 100 ms) to do so, so
// idle connections, however many and however fast re-opened, delay a real node (which sends its hello at once)
// by at most the listen backlog drained at MaxUnauth per grace (a node keeps its place in the queue for up to 30 s),
// and never lock it out. The grace of a connection that has sent its hello grows by four times the server's own
// lag (how late its process runs what the network wakes; at most AuthTimeout/2), so that thousands of real
// nodes connecting at once to a loaded server are not taken for silent ones. Authenticated connections have their
// own cap (MaxConns, default 16384: a pod of 4096 hosts and its next generation; a node beyond it is told the
// server is full and retries). Refused connections are logged at most once per WarnInterval (default 10 s), as
// one line with counts per reason; Server.Stats has the totals. A joined node silent for SilentBeats heartbeats is dropped and
// reported lost. The listen backlog is the kernel's net.core.somaxconn (Go asks for the most it allows): when it
// is below the number of nodes joining at once, a dropped SYN costs a node a retransmit (a second or more), not
// its join. The etcd backend relies on etcd's own transport security and auth: torchrun's options protocol=https
// (or https:// endpoints), cacert (the CA of etcd's certificate; default the system's roots), cert and key (the
// node's client certificate and key; cert alone may hold both); a join that times out because etcd refuses the
// node's certificate, or the node does not trust etcd's, names the TLS error and the endpoint.
package rendezvous
