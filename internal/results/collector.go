package results

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"go.uber.org/zap"

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
	Logger        *zap.Logger
	OnResult      func() // called after each result or error a worker reports is recorded (e.g. a metrics counter)
}

// Collector reads the result channels of all workers and enforces exactly one result per replica. Its methods
// are safe for concurrent use.
type Collector struct {
	opts Options

	// Memory stays bounded whatever workers send: per replica the first outcome (kept) and the first
	// MaxExamples others (without their values), per violation kind the first MaxExamples; the rest is counted.
	mu         sync.Mutex
	owners     map[int]owner           // by rank
	listed     map[int][]int           // replica -> indexes in outcomes of its first outcomes (the first is kept)
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

// owner is a worker and the node it runs on.
type owner struct {
	SharedWorker
	node int
}

// NewCollector returns a collector with opts.
func NewCollector(opts Options) *Collector {
	opts.Nodes = max(opts.Nodes, 1)
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	return &Collector{opts: opts, owners: map[int]owner{}, listed: map[int][]int{},
		reports: map[int]int{}, kindCount: map[string]int{},
		foreign: map[int][]foreignReport{}, foreignN: map[int]int{}}
}

// Consume reads the result channel of the worker rank (process pid, owning replicas) until EOF. It is called once
// per started worker, concurrently for all of them. It always reads to the end of r, so a worker never blocks on
// a full pipe, and returns the frame-level violations of this worker (errors.Join of *ContractError), or nil. It
// returns as soon as r fails (closed, deadline exceeded): a failure between frames is returned wrapped and is not a
// violation; inside a frame it is a truncated_frame violation that also wraps the reader's error.
// Duplicates and missing results are world-wide facts: Finish reports them.
func (c *Collector) Consume(rank, pid int, replicas []int, r io.Reader) error {
	log := c.opts.Logger.With(zap.Int("rank", rank), zap.Int("pid", pid))
	c.mu.Lock()
	c.owners[rank] = owner{SharedWorker{Rank: rank, PID: pid, Replicas: slices.Clone(replicas)}, c.opts.NodeRank}
	c.mu.Unlock()

	dec := worker.NewDecoder(r, c.opts.MaxFrameBytes, 64<<10) // the buffer for headers and small frames
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
					rank, pid, f.Kind, f.Replica, cmp.Or(worker.FormatReplicas(replicas), "none"), f.Kind)}
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

// add records an outcome: the first of its replica is kept whole, the next MaxExamples are kept without their
// value (to name who reported them), the rest only counted.
func (c *Collector) add(res Result) {
	c.mu.Lock()
	c.addOutcome(res)
	c.mu.Unlock()
	if c.opts.OnResult != nil {
		c.opts.OnResult()
	}
}

// addOutcome records res as an outcome of its replica. c.mu must be held.
func (c *Collector) addOutcome(res Result) {
	c.reports[res.Replica]++
	l := c.listed[res.Replica]
	if len(l) > MaxExamples {
		return
	}
	if len(l) > 0 {
		res.Value, res.ValueB64, res.Error = nil, nil, nil
	}
	c.listed[res.Replica] = append(l, len(c.outcomes))
	c.outcomes = append(c.outcomes, res)
}
