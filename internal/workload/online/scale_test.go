package online

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// DecideScale's arithmetic, one decision per case: up at once to what
// the requests in flight and waiting need (bounded by max_instances),
// once per polling interval and by the most seen in it; down only after
// scaleDownDelay below the target, never under min_instances; to zero
// after scale_to_zero_after without a request when min_instances is 0,
// and back to one while a cold start or a request waits.
func TestDecideScale(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	fixed := autoscaledDoc(t, "instance_count: 3\n").Spec
	// A replica takes 0.7 requests at its target: 3 requests need 5.
	util := autoscaledDoc(t, "request_settings: {max_concurrent_requests_per_instance: 1}\nscale_settings: {type: target_utilization, min_instances: 1, max_instances: 3, polling_interval: 1, target_utilization_percentage: 70}\n").Spec
	zero := autoscaledDoc(t, "scale_settings: {type: target_utilization, min_instances: 0, max_instances: 2, scale_to_zero_after: 5}\n").Spec
	n := func(v int) *int { return &v }
	win := func(lastPoll time.Time, peak int, highAt time.Time) *ScaleWindow {
		return &ScaleWindow{LastPoll: lastPoll, Peak: peak, HighAt: highAt}
	}
	// now is 100 s after t0 in the cases of zero: the server (Started)
	// and the deployment (Changed) are older than scale_to_zero_after
	// unless the case says otherwise.
	cases := []struct {
		name       string
		state      ScaleState
		now        time.Time
		want       int
		wantWindow *ScaleWindow
	}{
		{"scale_settings default: instance_count, no window",
			ScaleState{Deployment: fixed}, t0, 3, nil},
		{"the first decision: min_instances",
			ScaleState{Deployment: util}, t0, 1, win(t0, 0, t0)},
		{"a target kept in the store (a restarted server) stands",
			ScaleState{Deployment: util, Target: n(2)}, t0, 2, win(t0, 0, t0)},
		{"busy within the polling interval: the target stands, the peak is kept",
			ScaleState{Deployment: util, Target: n(1), Window: win(t0, 0, t0), Load: DeploymentLoad{InFlight: 2, Waiting: 1, LastRequest: t0}},
			t0, 1, win(t0, 3, t0)},
		{"busy after the polling interval: up at once to 3/0.7, bounded by max_instances",
			ScaleState{Deployment: util, Target: n(1), Window: win(t0, 3, t0), Load: DeploymentLoad{InFlight: 2, Waiting: 1, LastRequest: t0}},
			sec(1), 3, win(sec(1), 0, sec(1))},
		{"idle within scaleDownDelay: the target stands",
			ScaleState{Deployment: util, Target: n(3), Window: win(sec(1), 0, sec(1)), Load: DeploymentLoad{LastRequest: sec(1)}},
			sec(2), 3, win(sec(2), 0, sec(1))},
		{"idle past scaleDownDelay: down to min_instances",
			ScaleState{Deployment: util, Target: n(3), Window: win(sec(2), 0, sec(1)), Load: DeploymentLoad{LastRequest: sec(1)}},
			sec(1).Add(scaleDownDelay), 1, win(sec(1).Add(scaleDownDelay), 0, sec(1).Add(scaleDownDelay))},
		{"past scaleDownDelay with some need: down to the need, ceil(1/0.7)",
			ScaleState{Deployment: util, Target: n(3), Window: win(t0, 1, t0)},
			t0.Add(scaleDownDelay), 2, win(t0.Add(scaleDownDelay), 0, t0.Add(scaleDownDelay))},
		{"a burst seen between polls counts: the peak, not the last sample, ceil(2/0.7)",
			ScaleState{Deployment: util, Target: n(1), Window: win(t0, 2, t0), Load: DeploymentLoad{LastRequest: t0}},
			sec(1), 3, win(sec(1), 0, sec(1))},
		{"min_instances 0, made a second ago on an old server: keeps its replica",
			ScaleState{Deployment: zero, Started: t0, Changed: sec(99)}, sec(100), 1, win(sec(100), 0, sec(100))},
		{"min_instances 0, on a server started a second ago: keeps its replica",
			ScaleState{Deployment: zero, Started: sec(99), Changed: t0}, sec(100), 1, win(sec(100), 0, sec(100))},
		{"min_instances 0, just used",
			ScaleState{Deployment: zero, Target: n(1), Window: win(sec(99), 0, sec(99)), Load: DeploymentLoad{LastRequest: sec(100)}, Started: t0, Changed: t0},
			sec(100), 1, win(sec(100), 0, sec(99))},
		{"min_instances 0, idle for scale_to_zero_after: 0",
			ScaleState{Deployment: zero, Target: n(1), Window: win(sec(99), 0, sec(99)), Load: DeploymentLoad{LastRequest: sec(95)}, Started: t0, Changed: t0},
			sec(100), 0, win(sec(100), 0, sec(99))},
		{"min_instances 0, idle, a cold start waiting: 1",
			ScaleState{Deployment: zero, Target: n(0), Window: win(sec(99), 0, sec(99)), Load: DeploymentLoad{LastRequest: sec(95)}, Demanded: sec(100), Started: t0, Changed: t0},
			sec(100), 1, win(sec(100), 0, sec(100))},
		{"min_instances 0, idle, a cold start asked scale_to_zero_after ago: 0",
			ScaleState{Deployment: zero, Target: n(1), Window: win(sec(99), 0, sec(99)), Load: DeploymentLoad{LastRequest: sec(90)}, Demanded: sec(95), Started: t0, Changed: t0},
			sec(100), 0, win(sec(100), 0, sec(99))},
		{"min_instances 0, a request waiting (before the next poll): 1",
			ScaleState{Deployment: zero, Target: n(0), Window: win(sec(100), 0, sec(99)), Load: DeploymentLoad{Waiting: 1, LastRequest: t0}, Started: t0, Changed: t0},
			sec(100), 1, win(sec(100), 1, sec(99))},
	}
	for _, c := range cases {
		var before ScaleWindow
		if c.state.Window != nil {
			before = *c.state.Window
		}
		got := DecideScale(c.state, c.now)
		if got.Replicas != c.want {
			t.Errorf("%s: %d replicas, want %d", c.name, got.Replicas, c.want)
		}
		if diff := cmp.Diff(c.wantWindow, got.Window); diff != "" {
			t.Errorf("%s: window (-want +got):\n%s", c.name, diff)
		}
		if c.state.Window != nil && *c.state.Window != before {
			t.Errorf("%s: the state's window was changed: %+v, was %+v", c.name, *c.state.Window, before)
		}
		if again := DecideScale(c.state, c.now); !cmp.Equal(again, got) {
			t.Errorf("%s: decided %+v, then %+v from the same state", c.name, got, again)
		}
	}
}
