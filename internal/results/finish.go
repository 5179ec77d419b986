package results

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// duplicate builds the violation of a replica with several outcomes. c.mu must be held.
func (c *Collector) duplicate(replica int) *ContractError {
	return c.duplicateOf(replica, c.listedOutcomes(replica), c.reports[replica])
}

// listedOutcomes are the outcomes kept of replica, the first first. c.mu must be held.
func (c *Collector) listedOutcomes(replica int) []Result {
	all := make([]Result, len(c.listed[replica]))
	for k, i := range c.listed[replica] {
		all[k] = c.outcomes[i]
	}
	return all
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
	doc := &Document{RunID: c.opts.RunID, World: World{Size: cmp.Or(c.opts.WorldSize, len(exits)), Nodes: c.opts.Nodes},
		Results: []Result{}, Ranks: []RankStatus{}, Violations: []Violation{}}
	seed, merged := c.seedDuplicates()
	vs := slices.DeleteFunc(slices.Clone(c.violations), func(v *ContractError) bool { return merged[v] })
	vs = append(vs, c.countedOnly(vs, seed)...)
	for _, r := range slices.Sorted(maps.Keys(c.listed)) {
		switch {
		case seed[r] != nil:
			vs = append(vs, seed[r])
		case len(c.listed[r]) > 1:
			vs = append(vs, c.duplicate(r))
		}
		doc.Results = append(doc.Results, c.outcomes[c.listed[r][0]])
	}
	byRank := slices.Clone(exits) // a rank listed twice keeps its order
	slices.SortStableFunc(byRank, func(a, b RankExit) int { return cmp.Compare(a.Rank, b.Rank) })
	for _, e := range byRank {
		doc.Ranks = append(doc.Ranks, RankStatus{RankExit: e, OK: !e.Failed()})
		vs = append(vs, c.missing(e)...)
	}
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v
		doc.Violations = append(doc.Violations, v.violation())
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
		if len(c.listed[r]) == 0 {
			continue
		}
		all := c.listedOutcomes(r)
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
	for _, r := range o.Replicas {
		if len(c.listed[r]) > 0 {
			continue
		}
		out = append(out, &ContractError{Kind: ErrMissingResult, Replica: r, Rank: e.Rank, PID: e.PID,
			OtherRank: -1, OtherPID: -1, Hint: hintMissing,
			Message: fmt.Sprintf("rank %d pid %d%s exited 0 without reporting a result for replica %d (results are required)",
				e.Rank, e.PID, where, r)})
	}
	return out
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
