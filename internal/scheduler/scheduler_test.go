package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Job)
	}
	return out
}

func TestPickOrdersByPriorityThenSubmitOrder(t *testing.T) {
	queued := []Candidate{
		{Job: "c", Compute: "local", Seq: 3},
		{Job: "a", Compute: "local", Seq: 1},
		{Job: "urgent", Compute: "local", Seq: 9, Priority: 10},
		{Job: "b", Compute: "local", Seq: 2},
	}
	got := names(Pick(queued, map[string]int{"local": 3}))
	if diff := cmp.Diff([]string{"urgent", "a", "b"}, got); diff != "" {
		t.Errorf("picked (-want +got):\n%s", diff)
	}
}

func TestPickRespectsFreeSlotsPerTarget(t *testing.T) {
	queued := []Candidate{
		{Job: "x1", Compute: "x", Seq: 1},
		{Job: "y1", Compute: "y", Seq: 2},
		{Job: "x2", Compute: "x", Seq: 3},
		{Job: "z1", Compute: "z", Seq: 4},
	}
	got := names(Pick(queued, map[string]int{"x": 1, "y": 5}))
	if diff := cmp.Diff([]string{"x1", "y1"}, got); diff != "" {
		t.Errorf("picked (-want +got):\n%s", diff)
	}
}

func TestPickDoesNotModifyInput(t *testing.T) {
	queued := []Candidate{{Job: "b", Compute: "l", Seq: 2}, {Job: "a", Compute: "l", Seq: 1}}
	free := map[string]int{"l": 1}
	Pick(queued, free)
	if queued[0].Job != "b" || free["l"] != 1 {
		t.Fatalf("Pick changed its input: %v %v", queued, free)
	}
}
