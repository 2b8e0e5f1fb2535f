// Package scheduler decides which queued job attempts start where.
//
// Decisions are pure functions of a snapshot of state, so they are tested
// without servers and at any scale; the workspace service owns the loop that
// takes snapshots and applies the decisions. Pick fills the slots of the
// single-machine local target; Place puts jobs on the nodes of pool targets
// (clusters, instances) by CPU, memory and GPUs, with gangs and reservations.
package scheduler

import "sort"

// Candidate is a queued job as the scheduler sees it.
type Candidate struct {
	Job      string
	Compute  string
	Priority int   // higher first
	Seq      int64 // submit order: lower first among equal priority
}

// Pick returns the jobs to start now, in start order: by priority, then
// submit order, each taking one free slot of its compute target. free maps a
// target name to its free slots; targets not in it have none. Pick does not
// modify its arguments.
func Pick(queued []Candidate, free map[string]int) []Candidate {
	order := make([]Candidate, len(queued))
	copy(order, queued)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Priority != order[j].Priority {
			return order[i].Priority > order[j].Priority
		}
		return order[i].Seq < order[j].Seq
	})
	left := make(map[string]int, len(free))
	for k, v := range free {
		left[k] = v
	}
	var picked []Candidate
	for _, c := range order {
		if left[c.Compute] > 0 {
			left[c.Compute]--
			picked = append(picked, c)
		}
	}
	return picked
}
