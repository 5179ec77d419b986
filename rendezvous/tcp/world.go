package tcp

import (
	"time"
	"tpurun/rendezvous/internal/agree"

	"tpurun/rendezvous"
)

// world is one generation on the server: its members, and once complete, their ranks, barriers, data and
// failures. Guarded by Server.mu.
//
// Every wait on a world is for one event, and each event wakes only its waiters: a join waits for the world to
// form (formed: complete, or failed), a barrier for its last arrival, a gather for its key's last publication. A
// node lost or gone fails at once the barriers and gathers still waiting for it (nodeGone). No event scans the
// world: an arrival, a publication or a loss costs the same in a world of 4 nodes and of 4096.
type world struct {
	gen      int
	nnodes   int // the most nodes
	min      int // the fewest nodes (nnodes unless elastic)
	lastCall time.Duration
	// hosts is the host list naming every node by rank, when the joiners name one and the server holds the same
	// (ServerConfig.Hosts): the missing are named by it. hostsSum is the sum of the joiners' list (hostsSum),
	// mixed set when joiners named different lists.
	hosts    []string
	hostsSum string
	mixed    bool
	entries  []*entry // in arrival order
	// progress is the progress line last told a waiting node, made at progressAt: one line serves every node
	// that asks within progressFresh (each line is made from every entry).
	progress   string
	progressAt time.Time
	// the entries by instance, by host and by requested rank
	byInstance map[string]*entry
	byHost     map[string]*entry
	byAsked    map[int]*entry
	complete   bool
	byRank     []*entry
	agreed     *agree.Agreed // the agreed world, once complete; each node gets its share
	named      bool          // the host list names every node: shares leave the names out
	shares     *agree.Shares // every node's share, encoded once (Agreed.Encode)
	err        error
	formed     chan struct{} // closed when the join ends: the world complete (agreed or err), or joinErr
	ended      bool          // formed is closed
	barriers   map[string]*barrier
	data       map[string]*gathering
	gone       []int // the ranks of the nodes lost or left, in that order
	failures   []rendezvous.Failure
	// deadline ends the join phase: set by the first joiner, reset when every joiner has gone. joinErr is the
	// one error every joiner gets.
	deadline time.Time
	joinErr  error
	started  time.Time
	// lastCallEnd is set while the join has min..nnodes-1 nodes: the world completes then with those present.
	lastCallEnd   time.Time
	lastCallTimer *time.Timer
}

type entry struct {
	m    rendezvous.Member
	conn *sconn
	rank int
	left bool
	lost bool
}

// newWorld is generation gen, forming, with r's size range and host list.
func newWorld(gen int, r *joinReq, serverHosts []string, serverSum string) *world {
	w := &world{gen: gen, nnodes: r.nnodes, min: r.min, lastCall: r.lastCall, hostsSum: r.hostsSum,
		byInstance: map[string]*entry{}, byHost: map[string]*entry{}, byAsked: map[int]*entry{},
		barriers: map[string]*barrier{}, data: map[string]*gathering{}, formed: make(chan struct{})}
	if r.hostsSum != "" && r.hostsSum == serverSum {
		w.hosts = serverHosts
	}
	return w
}

// endJoin closes the join: every joiner waiting wakes and reads the outcome (the assignment or the error).
func (w *world) endJoin() {
	if !w.ended {
		w.ended = true
		close(w.formed)
	}
}

// failJoin ends the join with err for every joiner, unless it has ended.
func (w *world) failJoin(err error) {
	if !w.complete && w.joinErr == nil {
		w.stopLastCall()
		w.joinErr = err
		w.endJoin()
	}
}

func (w *world) add(e *entry) {
	w.entries = append(w.entries, e)
	w.index(e)
}

func (w *world) index(e *entry) {
	w.byInstance[e.m.Instance] = e
	if e.m.Host != "" {
		w.byHost[e.m.Host] = e
	}
	if e.m.Rank >= 0 {
		w.byAsked[e.m.Rank] = e
	}
}

func (w *world) unindex(e *entry) {
	delete(w.byInstance, e.m.Instance)
	if w.byHost[e.m.Host] == e {
		delete(w.byHost, e.m.Host)
	}
	if w.byAsked[e.m.Rank] == e {
		delete(w.byAsked, e.m.Rank)
	}
}

func (w *world) remove(e *entry) {
	w.unindex(e)
	for i, x := range w.entries {
		if x == e {
			w.entries = append(w.entries[:i], w.entries[i+1:]...)
			return
		}
	}
}

func (w *world) stopLastCall() {
	if w.lastCallTimer != nil {
		w.lastCallTimer.Stop()
		w.lastCallTimer = nil
	}
	w.lastCallEnd = time.Time{}
}

// live reports whether x holds its host and node rank: not lost, not left, and (while the world forms) connected.
func (w *world) live(x *entry) bool {
	return x != nil && !x.lost && !x.left && (x.conn != nil || w.complete)
}

// missing names the nodes that have not arrived: of an elastic world, those below its minimum.
func (w *world) missing(waited time.Duration) error {
	arrived := make([]rendezvous.Member, len(w.entries))
	for i, e := range w.entries {
		arrived[i] = e.m
	}
	return agree.Missing(w.gen, w.min, w.nnodes, arrived, w.hosts, waited)
}

// finish assigns ranks and checks agreement; called when the join is over with min..nnodes nodes present. It
// lays the world out and encodes every node's share once, then wakes the joiners.
func (w *world) finish() {
	w.complete = true
	defer w.endJoin()
	n := len(w.entries)
	members := make([]rendezvous.Member, n)
	for i, e := range w.entries {
		members[i] = e.m
	}
	ranks, err := agree.AssignRanks(members, n)
	if err == nil {
		err = agree.Agree(members, ranks, w.gen)
	}
	if err != nil {
		w.err = err
		return
	}
	w.byRank = make([]*entry, n)
	for i, e := range w.entries {
		e.rank = ranks[i]
		w.byRank[e.rank] = e
	}
	w.agreed = agree.AgreeWorld(members, ranks)
	w.named = !w.mixed && w.agreed.NamedBySum(w.hostsSum)
	w.shares = w.agreed.Encode(w.named)
}
