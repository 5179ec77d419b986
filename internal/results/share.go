package results

import (
	"fmt"
	"maps"
	"slices"
)

// Share is what one node of a multi-host run publishes when its workers are gone, for node 0 to merge with Add:
// its workers with the replicas each owns (so node 0 can tell a missing result world-wide), every outcome it
// accepted (duplicates included), and every violation it saw (frame-level and foreign).
type Share struct {
	Workers    []SharedWorker    `json:"workers"`
	Results    []Result          `json:"results,omitempty"`
	Violations []SharedViolation `json:"violations,omitempty"`
	// Counted is what the node only counted: per replica the outcomes beyond those in Results, per violation
	// kind the violations beyond those in Violations.
	Counted *Counted `json:"counted,omitempty"`
}

// Counted is what a collector counted without keeping it.
type Counted struct {
	Reports    map[int]int    `json:"reports,omitempty"`    // replica -> outcomes not in Results
	Foreign    map[int]int    `json:"foreign,omitempty"`    // replica -> foreign reports not in Violations
	Violations map[string]int `json:"violations,omitempty"` // kind -> violations not in Violations
}

// SharedWorker is one worker of a node and the replicas it owns.
type SharedWorker struct {
	Rank     int   `json:"rank"`
	PID      int   `json:"pid"`
	Replicas []int `json:"replicas"`
}

// SharedViolation is a *ContractError as a node shares it (its Cause stays on that node: the message names it).
type SharedViolation struct {
	Violation
	OtherRank int `json:"other_rank"`
	OtherPID  int `json:"other_pid"`
}

// Share returns what this node publishes: its workers, every outcome it accepted (in arrival order) and every
// violation it recorded (in arrival order). Call it once every Consume has returned.
func (c *Collector) Share() *Share {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &Share{Workers: make([]SharedWorker, 0, len(c.owners)), Results: slices.Clone(c.outcomes)}
	for _, rank := range slices.Sorted(maps.Keys(c.owners)) {
		s.Workers = append(s.Workers, c.owners[rank].SharedWorker)
	}
	for _, v := range c.violations {
		s.Violations = append(s.Violations, SharedViolation{v.violation(), v.OtherRank, v.OtherPID})
	}
	cnt := &Counted{Reports: map[int]int{}, Foreign: map[int]int{}, Violations: map[string]int{}}
	for r, n := range c.reports {
		if n > len(c.listed[r]) {
			cnt.Reports[r] = n - len(c.listed[r])
		}
	}
	for r, n := range c.foreignN {
		if n > len(c.foreign[r]) {
			cnt.Foreign[r] = n - len(c.foreign[r])
		}
	}
	for k, n := range c.kindCount {
		if n > MaxExamples {
			cnt.Violations[k] = n - MaxExamples
		}
	}
	if len(cnt.Reports)+len(cnt.Foreign)+len(cnt.Violations) > 0 {
		s.Counted = cnt
	}
	return s
}

// Add merges what node nodeRank shared into this collector (node 0's), so that Finish checks the world: its
// workers' replicas are checked for missing results like local ones, its outcomes take part in the exactly-once
// check (a replica reported on two nodes is a duplicate), and its violations are kept, their messages prefixed
// with the node. It returns the violations the merge brought or created (errors.Join of *ContractError), or nil.
func (c *Collector) Add(nodeRank int, s *Share) error {
	if s == nil {
		return nil
	}
	var more workerErrs
	c.mu.Lock()
	c.addWorkers(nodeRank, s.Workers)
	c.addViolations(nodeRank, s.Violations, &more)
	c.addCounted(s.Counted)
	replicas := map[int]bool{}
	for _, e := range s.Results {
		e.Node = nodeRank
		c.addOutcome(e)
		replicas[e.Replica] = true
	}
	for r := range replicas {
		if s.Counted != nil {
			c.reports[r] += max(0, s.Counted.Reports[r])
		}
		if c.reports[r] > 1 {
			more.add(c.duplicate(r))
		}
	}
	c.mu.Unlock()
	if c.opts.OnResult != nil {
		for range s.Results {
			c.opts.OnResult()
		}
	}
	return more.join()
}

// addWorkers records the workers of node nodeRank and the replicas each owns. c.mu must be held.
func (c *Collector) addWorkers(nodeRank int, ws []SharedWorker) {
	for _, w := range ws {
		if _, ok := c.owners[w.Rank]; !ok { // global ranks are unique: a clash is not this node's to resolve
			w.Replicas = slices.Clone(w.Replicas)
			c.owners[w.Rank] = owner{w, nodeRank}
		}
	}
}

// addViolations records the violations node nodeRank saw, their messages prefixed with the node, and adds them to
// more. c.mu must be held.
func (c *Collector) addViolations(nodeRank int, vs []SharedViolation, more *workerErrs) {
	for _, v := range vs {
		ce := &ContractError{Kind: kindOf(v.Kind), Replica: v.Replica, Rank: v.Rank, PID: v.PID, OtherRank: v.OtherRank,
			OtherPID: v.OtherPID, Message: fmt.Sprintf("node %d: %s", nodeRank, v.Message), Hint: v.Hint}
		c.recordLocked(ce)
		if ce.Kind == ErrForeignReplica {
			c.addForeign(ce, Result{Replica: ce.Replica, Rank: ce.Rank, PID: ce.PID, Node: nodeRank})
		}
		more.add(ce)
	}
}

// addCounted adds the violations and foreign reports a node only counted. c.mu must be held.
func (c *Collector) addCounted(cnt *Counted) {
	if cnt == nil {
		return
	}
	for k, n := range cnt.Violations {
		c.kindCount[k] += max(0, n)
	}
	for r, n := range cnt.Foreign {
		c.foreignN[r] += max(0, n)
	}
}
