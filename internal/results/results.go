// Package results owns the launcher's side of the result contract: it reads each worker's framed messages,
// enforces exactly one result per replica world-wide, names every violation, and builds the results document.
//
// The launcher calls Collector.Consume once per worker, in its own goroutine, with the read end of the worker's
// result pipe; after every worker exited it calls Finish with how each rank ended and gets the Document (always)
// and the violations (errors.Join of *ContractError; test them with errors.Is against ErrDuplicateResult,
// ErrForeignReplica, ErrMissingResult, ErrOversizedFrame, ErrMalformedFrame, ErrTruncatedFrame,
// ErrUnknownVersion). WriteFile writes the document atomically. Multi-host: each node publishes its Share (its
// workers and their replicas, its results and its violations), node 0 merges them with Add, and the same checks
// apply world-wide: exactly once, missing results on every node, every node's violations in one document.
//
// This file is the Collector and the Document; errors.go the violations, share.go the multi-host merge.
//
// Exit codes (Document.Decide): the first failing worker's code wins; otherwise exitcode.Results (65, EX_DATAERR)
// for a violated contract, 1 when a replica reported an error, 0 when everything arrived.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"tpurun/internal/exitcode"
	"tpurun/internal/proc"
	"tpurun/worker"
)

// Options configure a Collector.
type Options struct {
	MaxFrameBytes int64 // payload limit of one frame (--max-result-bytes); 0 means the decoder's, worker.DefaultMaxPayload
	Required      bool  // a worker that exits 0 must have reported every replica it owns (--fn, --expect-results)
	RunID         string
	WorldSize     int // workers world-wide, for the document
	Nodes         int // nodes world-wide, for the document (0 means 1)
	NodeRank      int // this node's rank, recorded in the results it collects
	BufferBytes   int // read buffer per worker for headers and small frames; 0 means 64 KiB
	Logger        *zap.Logger
	OnResult      func() // called after each result or error a worker reports is recorded (e.g. a metrics counter)
}

// Collector reads the result channels of all workers and enforces exactly one result per replica. Its methods
// are safe for concurrent use.
type Collector struct {
	opts Options
	log  *zap.Logger

	// Memory stays bounded whatever workers send: per replica the first outcome (kept) and the first
	// MaxExamples others (without their values), per violation kind the first MaxExamples; the rest is counted.
	mu         sync.Mutex
	owners     map[int]owner           // by rank
	first      map[int]int             // replica -> index in outcomes of its first outcome
	reporters  map[int][]int           // replica -> indexes in outcomes of its first outcomes, when more than one
	reports    map[int]int             // replica -> how many outcomes were reported for it (listed or not)
	outcomes   []Result                // the outcomes kept, in arrival order
	violations []*ContractError        // frame-level and foreign, the first MaxExamples of each kind
	kindCount  map[string]int          // violation kind -> how many (listed or not)
	foreign    map[int][]foreignReport // replica -> the first reports by workers that do not own it
	foreignN   map[int]int             // replica -> how many foreign reports
}

// MaxExamples is how many examples of one kind of violation (and how many extra reporters of one replica) a
// collector keeps; the others are counted.
const MaxExamples = 3

// foreignReport is an outcome a worker reported for a replica it does not own, with its violation.
type foreignReport struct {
	res Result
	ce  *ContractError
}

type owner struct {
	pid      int
	node     int
	replicas []int
}

// NewCollector returns a collector with opts.
func NewCollector(opts Options) *Collector {
	if opts.BufferBytes <= 0 {
		opts.BufferBytes = 64 << 10
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Collector{opts: opts, log: log, owners: map[int]owner{}, first: map[int]int{},
		reporters: map[int][]int{}, reports: map[int]int{}, kindCount: map[string]int{},
		foreign: map[int][]foreignReport{}, foreignN: map[int]int{}}
}

// Consume reads the result channel of the worker rank (process pid, owning replicas) until EOF. It is called once
// per started worker, concurrently for all of them. It always reads to the end of r, so a worker never blocks on
// a full pipe, and returns the frame-level violations of this worker (errors.Join of *ContractError), or nil. It
// returns as soon as r fails (closed, deadline exceeded): a failure between frames is returned wrapped and is not a
// violation; inside a frame it is a truncated_frame violation that also wraps the reader's error.
// Duplicates and missing results are world-wide facts: Finish reports them.
func (c *Collector) Consume(rank, pid int, replicas []int, r io.Reader) error {
	log := c.log.With(zap.Int("rank", rank), zap.Int("pid", pid))
	c.mu.Lock()
	c.owners[rank] = owner{pid: pid, node: c.opts.NodeRank, replicas: slices.Clone(replicas)}
	c.mu.Unlock()

	dec := worker.NewDecoder(r, c.opts.MaxFrameBytes, c.opts.BufferBytes)
	var errs workerErrs
	for {
		f, err := dec.Next()
		if err == io.EOF {
			return errs.join()
		}
		if err != nil {
			var fe *worker.FrameError
			if !errors.As(err, &fe) {
				// The channel itself failed between frames (closed, or the launcher stopped draining): not a
				// contract violation, but Consume must return it.
				errs.add(fmt.Errorf("rank %d pid %d: %w", rank, pid, err))
				return errs.join()
			}
			ce := frameViolation(rank, pid, fe)
			if !fe.InSync {
				if n, _ := dec.Drain(); n > 0 {
					ce.Message += fmt.Sprintf("; the rest of its channel (%d bytes) was discarded", n)
				}
			}
			c.record(log, ce)
			errs.add(ce)
			if !fe.InSync {
				return errs.join()
			}
			continue
		}
		if f.Kind == worker.KindHello {
			log.Debug("worker said hello", zap.ByteString("hello", f.Payload))
			continue
		}
		if !slices.Contains(replicas, f.Replica) {
			ce := &ContractError{Kind: ErrForeignReplica, Replica: f.Replica, Rank: rank, PID: pid, OtherRank: -1,
				OtherPID: -1, Hint: hintForeign,
				Message: fmt.Sprintf("rank %d pid %d reported a %s for replica %d, which it does not own (it owns %s); the %s was dropped",
					rank, pid, f.Kind, f.Replica, ownsText(replicas), f.Kind)}
			c.record(log, ce)
			c.mu.Lock()
			c.addForeign(ce, Result{Replica: f.Replica, Rank: rank, PID: pid, Node: c.opts.NodeRank})
			c.mu.Unlock()
			errs.add(ce)
			continue
		}
		res, ce := decodeOutcome(rank, pid, f)
		if ce != nil {
			c.record(log, ce)
			errs.add(ce)
			continue
		}
		res.Node = c.opts.NodeRank
		c.add(res)
	}
}

func ownsText(replicas []int) string {
	if len(replicas) == 0 {
		return "none"
	}
	return worker.FormatReplicas(replicas)
}

// decodeOutcome turns a result or error frame into a Result, checking its payload.
func decodeOutcome(rank, pid int, f worker.Frame) (Result, *ContractError) {
	res := Result{Replica: f.Replica, Rank: rank, PID: pid}
	bad := func(detail string) *ContractError {
		return &ContractError{Kind: ErrMalformedFrame, Replica: f.Replica, Rank: rank, PID: pid, OtherRank: -1,
			OtherPID: -1, Hint: hintMalformed,
			Message: fmt.Sprintf("rank %d pid %d sent a malformed %s frame for replica %d: %s", rank, pid, f.Kind, f.Replica, detail)}
	}
	switch f.Kind {
	case worker.KindResult:
		res.OK = true
		if f.Encoding == worker.EncodingPickle {
			res.Encoding, res.ValueB64 = "pickle", f.Payload
			return res, nil
		}
		if err := f.CheckJSON(); err != nil {
			ce := bad(fmt.Sprintf("its %d-byte payload is not valid JSON in UTF-8", len(f.Payload)))
			var huge *worker.HugeIntegerError
			if errors.As(err, &huge) { // valid JSON, but the results document would be unreadable in Python
				ce = bad(fmt.Sprintf("its JSON holds %v", huge))
				ce.Hint, ce.Cause = hintHugeInteger, huge
			}
			return res, ce
		}
		res.Encoding, res.Value = "json", f.Payload
	case worker.KindError:
		var info ErrorInfo
		if err := json.Unmarshal(f.Payload, &info); err != nil {
			return res, bad(fmt.Sprintf("its payload is not a JSON error {type, message, traceback}: %v", err))
		}
		if info.Type == "" && info.Message == "" {
			return res, bad("the error has neither a type nor a message")
		}
		res.Error = &info
	}
	return res, nil
}

// frameViolation names a decoding failure.
func frameViolation(rank, pid int, fe *worker.FrameError) *ContractError {
	ce := &ContractError{Replica: fe.Replica, Rank: rank, PID: pid, OtherRank: -1, OtherPID: -1, Cause: fe}
	switch {
	case errors.Is(fe, worker.ErrTooLarge):
		ce.Kind, ce.Hint = ErrOversizedFrame, hintOversized
		ce.Message = fmt.Sprintf("rank %d pid %d sent a %s frame of %d bytes for replica %d, over the limit of %d bytes (max result bytes); the frame was dropped",
			rank, pid, fe.Kind, fe.Length, fe.Replica, fe.Limit)
	case errors.Is(fe, worker.ErrUnknownVersion):
		ce.Kind, ce.Hint = ErrUnknownVersion, hintVersion
		ce.Message = fmt.Sprintf("rank %d pid %d sent a frame of protocol version %d at byte %d; this tpurun reads version %d",
			rank, pid, fe.Version, fe.Offset, worker.Version)
	case errors.Is(fe, worker.ErrTruncated):
		ce.Kind, ce.Hint = ErrTruncatedFrame, hintTruncated
		ce.Message = fmt.Sprintf("rank %d pid %d: its result channel ended in the middle of the frame at byte %d (%s)",
			rank, pid, fe.Offset, fe.Detail)
	default:
		ce.Kind, ce.Hint = ErrMalformedFrame, hintMalformed
		ce.Message = fmt.Sprintf("rank %d pid %d sent a malformed frame at byte %d: %s", rank, pid, fe.Offset, fe.Detail)
	}
	return ce
}

// record keeps ce if it is among the first MaxExamples of its kind and counts it; the first of each kind is
// logged (one log line per kind: a flood of bad frames is not a flood of log lines).
func (c *Collector) record(log *zap.Logger, ce *ContractError) {
	c.mu.Lock()
	n := c.recordLocked(ce)
	c.mu.Unlock()
	if n == 1 {
		log.Warn("result contract violated (further violations of this kind are counted, not logged)", zap.Error(ce))
	}
}

func (c *Collector) recordLocked(ce *ContractError) int {
	k := ce.KindName()
	c.kindCount[k]++
	if c.kindCount[k] <= MaxExamples {
		c.violations = append(c.violations, ce)
	}
	return c.kindCount[k]
}

// addForeign keeps the first foreign reports of a replica and counts them all. c.mu must be held.
func (c *Collector) addForeign(ce *ContractError, res Result) {
	c.foreignN[res.Replica]++
	if len(c.foreign[res.Replica]) < MaxExamples {
		c.foreign[res.Replica] = append(c.foreign[res.Replica], foreignReport{res: res, ce: ce})
	}
}

// workerErrs are the violations Consume returns for one worker: the first MaxExamples and a count of the rest.
type workerErrs struct {
	list []error
	more int
}

func (w *workerErrs) add(err error) {
	if len(w.list) < MaxExamples {
		w.list = append(w.list, err)
		return
	}
	w.more++
}

func (w *workerErrs) join() error {
	if w.more > 0 {
		return errors.Join(append(w.list, fmt.Errorf("and %d more violations of the result contract", w.more))...)
	}
	return errors.Join(w.list...)
}

func (c *Collector) add(res Result) {
	c.addLocked(res)
	if c.opts.OnResult != nil {
		c.opts.OnResult()
	}
}

// addLocked records an outcome: the first of its replica is kept whole, the next MaxExamples are kept without
// their value (to name who reported them), the rest only counted.
func (c *Collector) addLocked(res Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addOutcome(res, 1)
}

// addOutcome records res as n outcomes of its replica (n > 1: res stands for others that were only counted).
// c.mu must be held.
func (c *Collector) addOutcome(res Result, n int) {
	c.reports[res.Replica] += n
	j, ok := c.first[res.Replica]
	if !ok {
		c.first[res.Replica] = len(c.outcomes)
		c.outcomes = append(c.outcomes, res)
		return
	}
	if len(c.reporters[res.Replica]) > MaxExamples {
		return
	}
	if len(c.reporters[res.Replica]) == 0 {
		c.reporters[res.Replica] = []int{j}
	}
	res.Value, res.ValueB64, res.Error = nil, nil, nil
	c.reporters[res.Replica] = append(c.reporters[res.Replica], len(c.outcomes))
	c.outcomes = append(c.outcomes, res)
}

// kindOf is the sentinel of a violation kind's document name; a name this tpurun does not know (another
// release's) stays a violation under its own name.
func kindOf(name string) error {
	for _, k := range kinds {
		if k.name == name {
			return k.err
		}
	}
	return errors.New(name)
}

// duplicate builds the violation of a replica with several outcomes. c.mu must be held.
func (c *Collector) duplicate(replica int) *ContractError {
	all := make([]Result, len(c.reporters[replica]))
	for k, i := range c.reporters[replica] {
		all[k] = c.outcomes[i]
	}
	return c.duplicateOf(replica, all, c.reports[replica])
}

// duplicateOf builds the violation of a replica reported total times, the first of them by the outcomes in all (at
// least two; the first is the one kept). Reporters beyond all are counted, not named.
func (c *Collector) duplicateOf(replica int, all []Result, total int) *ContractError {
	multiNode := false
	ranks := map[int]bool{}
	for _, o := range all {
		ranks[o.Rank] = true
		multiNode = multiNode || o.Node != c.opts.NodeRank
	}
	names := make([]string, len(all))
	for k, o := range all {
		names[k] = fmt.Sprintf("rank %d pid %d", o.Rank, o.PID)
		if multiNode {
			names[k] += fmt.Sprintf(" (node %d)", o.Node)
		}
	}
	list := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	total = max(total, len(all))
	if total > len(all) {
		list = strings.Join(names, ", ") + fmt.Sprintf(" and %d more", total-len(all))
	}
	a, b := all[0], all[1]
	hint := hintDuplicateRanks
	if len(ranks) == 1 {
		hint = hintDuplicateSelf
	}
	return &ContractError{Kind: ErrDuplicateResult, Replica: replica, Rank: a.Rank, PID: a.PID,
		OtherRank: b.Rank, OtherPID: b.PID, Hint: hint,
		Message: fmt.Sprintf("%d results for replica %d: %s; the first was kept", total, replica, list)}
}

// Finish builds the document once every worker has exited and every Consume has returned. exits lists how each
// rank ended, in the order the launcher saw them end (the first failure gives the exit code, Document.Decide). It
// returns the document (always, also when the run failed) and the violations (errors.Join of *ContractError), or
// nil.
func (c *Collector) Finish(exits []RankExit) (*Document, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	doc := &Document{RunID: c.opts.RunID, World: World{Size: c.opts.WorldSize, Nodes: c.opts.Nodes},
		Results: []Result{}, Ranks: []RankStatus{}, Violations: []Violation{}}
	if doc.World.Size == 0 {
		doc.World.Size = len(exits)
	}
	seed, merged := c.seedDuplicates()
	var vs []*ContractError
	for _, v := range c.violations {
		if !merged[v] {
			vs = append(vs, v)
		}
	}
	vs = append(vs, c.countedOnly(vs, seed)...)
	for _, r := range slices.Sorted(maps.Keys(c.first)) {
		switch {
		case seed[r] != nil:
			vs = append(vs, seed[r])
		case len(c.reporters[r]) > 0:
			vs = append(vs, c.duplicate(r))
		}
		doc.Results = append(doc.Results, c.outcomes[c.first[r]])
	}
	for _, e := range byRank(exits) {
		doc.Ranks = append(doc.Ranks, RankStatus{RankExit: e, OK: !e.Failed()})
		vs = append(vs, c.missing(e)...)
	}
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v
		doc.Violations = append(doc.Violations, Violation{Kind: v.KindName(), Message: v.Message,
			Replica: v.Replica, Rank: v.Rank, PID: v.PID, Hint: v.Hint})
	}
	doc.Decide(firstFailure(exits))
	return doc, errors.Join(errs...)
}

// seedDuplicates merges the seed scenario: every process believes it is replica 0, so its owner reports it and
// the others report it as foreign. Those reports are one duplicate ("4 results for replica 0: ...") rather than 3
// foreign ones. It returns that duplicate by replica, and the foreign violations it stands for. c.mu must be held.
func (c *Collector) seedDuplicates() (seed map[int]*ContractError, merged map[*ContractError]bool) {
	seed, merged = map[int]*ContractError{}, map[*ContractError]bool{}
	for r, frs := range c.foreign {
		first, ok := c.first[r]
		if !ok {
			continue
		}
		all := []Result{c.outcomes[first]}
		for _, i := range c.reporters[r] {
			if i != first {
				all = append(all, c.outcomes[i])
			}
		}
		for _, fr := range frs {
			all = append(all, fr.res)
			merged[fr.ce] = true
		}
		seed[r] = c.duplicateOf(r, all, c.reports[r]+c.foreignN[r])
	}
	return seed, merged
}

// countedOnly is, per kind in name order, one violation saying how many more there were than listed: violations
// only counted. c.mu must be held.
func (c *Collector) countedOnly(listed []*ContractError, seed map[int]*ContractError) []*ContractError {
	shown := map[string]int{}
	for _, v := range listed {
		shown[v.KindName()]++
	}
	var out []*ContractError
	for _, k := range slices.Sorted(maps.Keys(c.kindCount)) {
		if extra := c.counted(k, seed) - shown[k]; extra > 0 {
			out = append(out, &ContractError{Kind: kindOf(k), Replica: -1, Rank: -1, PID: -1, OtherRank: -1, OtherPID: -1,
				Message: fmt.Sprintf("%d more %s violations like those above were counted, not listed", extra, k)})
		}
	}
	return out
}

// counted is how many violations of kind there were, but for foreign reports merged into a seed duplicate: those
// are counted there. c.mu must be held.
func (c *Collector) counted(kind string, seed map[int]*ContractError) int {
	if kind != "foreign_replica" {
		return c.kindCount[kind]
	}
	n := 0
	for r, m := range c.foreignN {
		if seed[r] == nil {
			n += m
		}
	}
	return n
}

// missing is the violations of a rank that exited 0 without reporting every replica it owns, when results are
// required. c.mu must be held.
func (c *Collector) missing(e RankExit) []*ContractError {
	if !c.opts.Required || e.Failed() {
		return nil
	}
	o := c.owners[e.Rank]
	where := ""
	if o.node != c.opts.NodeRank {
		where = fmt.Sprintf(" (node %d)", o.node)
	}
	var out []*ContractError
	for _, r := range o.replicas {
		if _, ok := c.first[r]; ok {
			continue
		}
		out = append(out, &ContractError{Kind: ErrMissingResult, Replica: r, Rank: e.Rank, PID: e.PID,
			OtherRank: -1, OtherPID: -1, Hint: hintMissing,
			Message: fmt.Sprintf("rank %d pid %d%s exited 0 without reporting a result for replica %d (results are required)",
				e.Rank, e.PID, where, r)})
	}
	return out
}

// byRank is exits in rank order (a rank listed twice keeps its order).
func byRank(exits []RankExit) []RankExit {
	sorted := slices.Clone(exits)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Rank < sorted[j].Rank })
	return sorted
}

// firstFailure is the exit code of the first failed exit, in the order the launcher saw them end: its code, or 1
// for a launcher-side error or a signal the launcher did not map to 128+N; 0 when none failed.
func firstFailure(exits []RankExit) int {
	for _, e := range exits {
		if e.Failed() {
			return max(e.ExitCode, 1)
		}
	}
	return 0
}

// Document is the results of one run, as written by --results and printed by --json.
type Document struct {
	RunID      string       `json:"run_id"`
	World      World        `json:"world"`
	Results    []Result     `json:"results"`
	Ranks      []RankStatus `json:"ranks"`
	Violations []Violation  `json:"violations"`
	OK         bool         `json:"ok"`
	ExitCode   int          `json:"exit_code"`
}

// Decide sets the document's exit code and OK, and returns the code. failure is the exit code of what failed the
// run, 0 when nothing did; it wins. Then a violated contract gives exitcode.Results (65), then a replica's
// reported error exitcode.ReplicaError (1); else the code is 0. This is the one place that order is written:
// Finish decides with the first failed exit it was given, and a launcher that knows better what failed the run (a
// timeout, a signal, another node's verdict) decides again with that failure's code.
func (d *Document) Decide(failure int) int {
	d.ExitCode = failure
	switch {
	case failure != 0:
	case len(d.Violations) > 0:
		d.ExitCode = exitcode.Results
	case len(d.ReplicaErrors()) > 0:
		d.ExitCode = exitcode.ReplicaError
	}
	d.OK = d.ExitCode == 0
	return d.ExitCode
}

// ReplicaErrors returns the results that are a replica's reported error, in replica order.
func (d *Document) ReplicaErrors() []Result {
	var out []Result
	for _, r := range d.Results {
		if !r.OK && r.Error != nil {
			out = append(out, r)
		}
	}
	return out
}

// World is the size of the run.
type World struct {
	Size  int `json:"size"`
	Nodes int `json:"nodes"`
}

// Result is the outcome of one replica: a value (JSON in Value, or a pickle in ValueB64 with Encoding "pickle")
// or an error.
type Result struct {
	Replica  int             `json:"replica"`
	Rank     int             `json:"rank"`
	PID      int             `json:"pid"`
	Node     int             `json:"node"`
	OK       bool            `json:"ok"`
	Encoding string          `json:"encoding,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	ValueB64 []byte          `json:"value_b64,omitempty"`
	Error    *ErrorInfo      `json:"error,omitempty"`
}

// ErrorInfo is a worker's failure as it reported it.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// RankExit is how a worker process ended, filled in by the launcher. ExitCode is the exit status, or 128+N when
// the worker was killed by signal N (then Signal names it, e.g. "killed" or "SIGKILL"); Err is a launcher-side
// failure (could not start, ...). The first failed RankExit passed to Finish gives the run's exit code.
type RankExit struct {
	Rank     int    `json:"rank"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Err      string `json:"error,omitempty"`
}

// ExitOf is how a worker process ended, as the document records it: the one conversion from a proc.Exit. The exit
// status, or 128+N and the signal's name for a worker killed by signal N.
func ExitOf(rank int, e proc.Exit) RankExit {
	x := RankExit{Rank: rank, PID: e.PID, ExitCode: e.ExitStatus()}
	if e.Signal != 0 {
		x.Signal = proc.SignalName(e.Signal)
	}
	return x
}

// Failed reports whether the worker did not end with exit code 0.
func (e RankExit) Failed() bool { return e.ExitCode != 0 || e.Signal != "" || e.Err != "" }

// RankStatus is a rank's exit in the document.
type RankStatus struct {
	RankExit
	OK bool `json:"ok"`
}

// Violation is a contract violation in the document.
type Violation struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Replica int    `json:"replica"`
	Rank    int    `json:"rank"`
	PID     int    `json:"pid"`
	Hint    string `json:"hint,omitempty"`
}

// WriteFile writes doc to path atomically: to a new temporary file in the same directory (created with O_EXCL
// and O_NOFOLLOW, so a planted file or symlink is never followed or overwritten), then renamed over path, mode 0644.
func WriteFile(path string, doc *Document) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the results document for %s: %w", path, err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	var f *os.File
	for i := 0; ; i++ {
		tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if err == nil || !os.IsExist(err) || i >= 10 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write the results document %s: create a temporary file in %s: %w", path, dir, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write the results document %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the results document %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the results document %s: rename %s: %w", path, tmp, err)
	}
	return nil
}
