package workspace

import (
	"log/slog"
	"sync"

	"github.com/ferry-ml/ferry/internal/store"
)

// unusableLog logs that a compute is unusable once per change: when it
// becomes unusable, when the reason changes, and when it is usable again.
// The dispatcher and the pool loop meet an unusable compute on every pass,
// once a second, and a line a pass for as long as nobody fixes the
// compute buried every other line of the server's log (issue 29). The
// compute's own state and events keep the reason for `compute show`.
type unusableLog struct {
	log *slog.Logger

	mu  sync.Mutex
	why map[string]string // compute name -> the reason last logged
}

func newUnusableLog(log *slog.Logger) *unusableLog {
	return &unusableLog{log: log, why: map[string]string{}}
}

// unusable logs that compute name is unusable for why, unless that is
// what was last logged for it.
func (u *unusableLog) unusable(name, why string) {
	u.mu.Lock()
	last, known := u.why[name]
	u.why[name] = why
	u.mu.Unlock()
	if known && last == why {
		return
	}
	u.log.Error("compute unusable", "compute", name, "reason", why)
}

// usable logs that compute name, logged as unusable, is usable again.
func (u *unusableLog) usable(name string) {
	u.mu.Lock()
	_, known := u.why[name]
	delete(u.why, name)
	u.mu.Unlock()
	if known {
		u.log.Info("compute usable again", "compute", name)
	}
}

// keep forgets the computes that are not in recs, the whole store's
// computes: one deleted, then made again with the same fault, is logged
// again.
func (u *unusableLog) keep(recs []store.Compute) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.why) == 0 {
		return
	}
	live := make(map[string]bool, len(recs))
	for _, r := range recs {
		live[r.Name] = true
	}
	for name := range u.why {
		if !live[name] {
			delete(u.why, name)
		}
	}
}

// computeUnusable logs that compute name cannot be used for why, once per
// change.
func (s *Service) computeUnusable(name, why string) { s.unusable.unusable(name, why) }

// computeUsable logs that compute name, logged as unusable, can be used
// again.
func (s *Service) computeUsable(name string) { s.unusable.usable(name) }
