package gateway

import (
	"context"
	"slices"
	"sync"
	"time"
)

// limiter counts a deployment's requests in flight against its capacity
// (ready replicas × max_concurrent_requests_per_instance), which changes
// as replicas come and go. A request that finds no slot waits for one up
// to its queue wait, as Azure's max_queue_wait_ms.
type limiter struct {
	mu       sync.Mutex
	inFlight int
	capacity int
	freed    chan struct{} // closed, and replaced, when a slot may have freed
}

func newLimiter() *limiter { return &limiter{freed: make(chan struct{})} }

func (l *limiter) setCapacity(n int) {
	l.mu.Lock()
	l.capacity = n
	l.wake()
	l.mu.Unlock()
}

// wake tells the waiters to look again; l.mu is held.
func (l *limiter) wake() {
	close(l.freed)
	l.freed = make(chan struct{})
}

// acquire takes a slot, waiting up to wait for one (0: only if one is
// free now), and says whether it got one.
func (l *limiter) acquire(ctx context.Context, wait time.Duration) bool {
	var deadline <-chan time.Time
	for {
		l.mu.Lock()
		if l.inFlight < l.capacity {
			l.inFlight++
			l.mu.Unlock()
			return true
		}
		freed := l.freed
		l.mu.Unlock()
		if wait <= 0 {
			return false
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-freed:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (l *limiter) release() {
	l.mu.Lock()
	l.inFlight--
	l.wake()
	l.mu.Unlock()
}

// latencies keeps a deployment's request count, error count and its last
// answers' durations, for the percentiles `online-endpoint show` prints.
type latencies struct {
	mu       sync.Mutex
	requests int64
	errors   int64
	ring     []time.Duration
	next     int
	// The percentiles last worked out, of the ring when it had seen
	// pctOf requests, at pctAt. Working them out sorts up to
	// latencyWindow durations; the deployment controller asks for the
	// load several times a second under a steady stream of requests, so
	// they are worked out again at most every percentilesMaxAge.
	p50, p99 time.Duration
	pctOf    int64
	pctAt    time.Time
}

// percentilesMaxAge is how stale the percentiles may be while requests
// keep coming (they are exact once requests stop).
const percentilesMaxAge = time.Second

// latencyWindow is how many recent requests the percentiles are of.
const latencyWindow = 4096

func newLatencies() *latencies { return &latencies{} }

func (l *latencies) add(d time.Duration, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	if failed {
		l.errors++
	}
	if len(l.ring) < latencyWindow {
		l.ring = append(l.ring, d)
		return
	}
	l.ring[l.next] = d
	l.next = (l.next + 1) % latencyWindow
}

func (l *latencies) snapshot() Stats {
	return l.snapshotAt(time.Now())
}

func (l *latencies) snapshotAt(now time.Time) Stats {
	l.mu.Lock()
	s := Stats{Requests: l.requests, Errors: l.errors}
	if len(l.ring) == 0 || l.pctOf == l.requests || (l.pctOf > 0 && now.Sub(l.pctAt) < percentilesMaxAge) {
		s.P50, s.P99 = l.p50, l.p99
		l.mu.Unlock()
		return s
	}
	ds := slices.Clone(l.ring)
	l.mu.Unlock()
	slices.Sort(ds)
	s.P50 = ds[len(ds)/2]
	s.P99 = ds[min(len(ds)-1, len(ds)*99/100)]
	l.mu.Lock()
	if s.Requests >= l.pctOf {
		l.p50, l.p99, l.pctOf, l.pctAt = s.P50, s.P99, s.Requests, now
	}
	l.mu.Unlock()
	return s
}
