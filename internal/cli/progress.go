package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress drawing: one line, redrawn in place with \r, that is erased
// before anything else is printed, so that a message never lands on the
// same line as the bar.
const (
	progressEvery = 200 * time.Millisecond // redraws at most this often
	// An estimate of the time left is shown only once the rate has been
	// measured for a while: the first bytes go out at a rate that says
	// nothing (a first figure of "53h13m24s" did).
	etaAfter    = time.Second
	etaAfterPct = 0.01
	etaAtMost   = 24 * time.Hour // longer estimates are not shown
	barWidth    = 24
)

// progressLine draws the progress of a transfer of total bytes to w.
// Add may be called from several goroutines.
type progressLine struct {
	w     io.Writer
	label string
	total int64
	now   func() time.Time

	mu        sync.Mutex
	done      int64
	start     time.Time
	lastDrawn time.Time
	drawn     bool
}

func newProgressLine(w io.Writer, label string, total int64, now func() time.Time) *progressLine {
	return &progressLine{w: w, label: label, total: total, now: now, start: now()}
}

// Add counts n more bytes sent and redraws the line when it is due.
func (p *progressLine) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	t := p.now()
	if p.drawn && t.Sub(p.lastDrawn) < progressEvery && p.done < p.total {
		return
	}
	p.lastDrawn, p.drawn = t, true
	fmt.Fprint(p.w, "\r"+p.text(t)+"\x1b[K")
}

// Clear erases the line, leaving the cursor at its start, so that what is
// printed next starts a clean line.
func (p *progressLine) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// text is the line at time t: "uploading code: 42% [=====     ] 12.0 MiB
// of 28.5 MiB, 3.1 MiB/s, 5s left".
func (p *progressLine) text(t time.Time) string {
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(p.done)/float64(p.total), 1)
	}
	fill := int(frac * barWidth)
	s := fmt.Sprintf("%s: %3.0f%% [%s%s] %s of %s", p.label, frac*100,
		strings.Repeat("=", fill), strings.Repeat(" ", barWidth-fill), humanBytes(p.done), humanBytes(p.total))
	elapsed := t.Sub(p.start)
	if elapsed <= 0 || p.done == 0 {
		return s
	}
	rate := float64(p.done) / elapsed.Seconds()
	s += fmt.Sprintf(", %s/s", humanBytes(int64(rate)))
	if elapsed < etaAfter || frac < etaAfterPct || p.done >= p.total {
		return s
	}
	left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
	if left > etaAtMost {
		return s
	}
	return s + ", " + left.Round(time.Second).String() + " left"
}
