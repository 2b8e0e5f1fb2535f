package online

import (
	"math"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// scaleDownDelay is how long autoscale's need must stay below its target
// before the target comes down (Kubernetes' stabilization).
const scaleDownDelay = 30 * time.Second

// ScaleState is what DecideScale decides a deployment's replica count
// from: its file, its traffic now, and what autoscale kept of its earlier
// decisions.
type ScaleState struct {
	// Deployment is the deployment's file, with its defaults applied:
	// its instance_count, scale_settings and request_settings.
	Deployment *spec.OnlineDeployment
	// Target is the count autoscale decided last (the store keeps it,
	// so a restarted server does not scale from scratch); nil before its
	// first decision, which starts from min_instances, and at least 1.
	Target *int
	// Window is what autoscale saw since it last compared the need with
	// the target; nil before its first decision on this server.
	Window *ScaleWindow
	// Load is the deployment's traffic as the gateway sees it now.
	Load DeploymentLoad
	// Demanded is when a cold start last asked for a replica; zero when
	// none did.
	Demanded time.Time
	// Started is when the server started, and Changed when the
	// deployment was created or last changed: a deployment scales to
	// zero after scale_to_zero_after without a request, counted from the
	// latest of its last request, these two and Demanded.
	Started, Changed time.Time
}

// autoscaled says whether d's count is autoscale's (scale_settings of
// type target_utilization) rather than its instance_count.
func autoscaled(d *spec.OnlineDeployment) bool {
	return d.ScaleSettings != nil && d.ScaleSettings.Type == "target_utilization"
}

// ScaleWindow is what autoscale keeps between its decisions on one
// server: the need is compared with the target once per polling
// interval, by the most requests seen in it, not by the last sample.
type ScaleWindow struct {
	LastPoll time.Time // when the need was last compared with the target
	Peak     int       // most requests in flight or waiting seen since LastPoll
	HighAt   time.Time // when the need last reached the target
}

// ScaleDecision is how many replicas of its current generation a
// deployment wants now.
type ScaleDecision struct {
	Replicas int
	// Window is the next decision's ScaleWindow, and Replicas its Target;
	// nil for a deployment of a fixed instance_count, which autoscale
	// leaves alone.
	Window *ScaleWindow
}

// DecideScale is how many replicas a deployment wants at now, as a pure
// function of s: the same s and now give the same decision, and s is
// not modified.
//
// A deployment whose scale_settings are not target_utilization wants its
// instance_count. Otherwise autoscale's target moves between
// min_instances and max_instances by the requests in flight or waiting
// per replica: once per polling_interval, the most of them seen in the
// interval over what a replica takes (max_concurrent_requests_per_instance
// at target_utilization_percentage) is the need; the target rises to a
// need above it at once, and comes down to a need below it only after the
// need stayed below for scaleDownDelay. With min_instances 0 it is 0
// after scale_to_zero_after without a request (nor a cold start, nor a
// change of the deployment, nor the server's start), and at least 1 while
// a cold start or a request waits.
func DecideScale(s ScaleState, now time.Time) ScaleDecision {
	d := s.Deployment
	if !autoscaled(d) {
		return ScaleDecision{Replicas: d.InstanceCount}
	}
	ss := d.ScaleSettings
	lo, hi := *ss.MinInstances, ss.MaxInstances
	target := max(lo, 1)
	if s.Target != nil {
		target = *s.Target
	}
	w := ScaleWindow{LastPoll: now, HighAt: now}
	if s.Window != nil {
		w = *s.Window
	}
	load := s.Load
	w.Peak = max(w.Peak, load.InFlight+load.Waiting)
	demanded := !s.Demanded.IsZero() && now.Sub(s.Demanded) < time.Duration(max(ss.ScaleToZeroAfter, 1))*time.Second
	if now.Sub(w.LastPoll) >= time.Duration(max(ss.PollingInterval, 1))*time.Second {
		perReplica := float64(max(d.RequestSettings.MaxConcurrentRequestsPerInstance, 1)) * float64(ss.TargetUtilizationPercentage) / 100
		need := int(math.Ceil(float64(w.Peak) / perReplica))
		switch {
		case need >= target:
			target, w.HighAt = min(need, hi), now
		case now.Sub(w.HighAt) >= scaleDownDelay:
			target, w.HighAt = max(need, lo, min(target, 1)), now
		}
		w.LastPoll, w.Peak = now, 0
	}
	if lo == 0 {
		last := load.LastRequest
		for _, t := range []time.Time{s.Started, s.Changed, s.Demanded} {
			if t.After(last) {
				last = t
			}
		}
		if load.InFlight+load.Waiting == 0 && now.Sub(last) >= time.Duration(ss.ScaleToZeroAfter)*time.Second {
			target = 0
		}
	}
	if demanded || load.Waiting > 0 {
		target = max(target, 1)
	}
	target = min(max(target, lo), hi)
	return ScaleDecision{Replicas: target, Window: &w}
}
