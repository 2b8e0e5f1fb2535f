package sizes

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
)

// Default quotas, in cores. Azure starts CPU families with tens to hundreds
// of cores and specialised GPU families at zero; Ferry runs on hardware the
// team owns, so zero would only make every GPU cluster fail until an owner
// found the quota page. The defaults instead let one cluster of a few GPU
// nodes run (24 cores is four NC6 or one NC24s_v3) while still stopping one
// user's max_instances from claiming a team's whole GPU fleet.
const (
	DefaultCPUCores         = 100 // per CPU family, dedicated
	DefaultGPUCores         = 24  // per GPU family, dedicated
	DefaultLowPriorityCores = 100 // one limit across all families
)

// Quotas are a workspace's core limits. Dedicated cores are limited per
// family; low-priority cores share one limit across families, as in Azure.
// The zero Quotas allows nothing; start from DefaultQuotas. A Quotas value is
// read-only once made and may be shared between goroutines.
type Quotas struct {
	// FamilyCores sets the dedicated core limit of a family (keys matched
	// ignoring case). Families not listed get DefaultCPU or DefaultGPU by
	// whether the size asked about has GPUs.
	FamilyCores map[string]int
	DefaultCPU  int
	DefaultGPU  int
	// LowPriorityCores limits the cores of all low-priority nodes together.
	LowPriorityCores int
	// EnabledSizes holds the restricted sizes an owner has enabled, by name
	// (matched ignoring case).
	EnabledSizes map[string]bool
}

// DefaultQuotas returns the quotas of a new workspace: DefaultCPUCores per
// CPU family, DefaultGPUCores per GPU family, DefaultLowPriorityCores for
// low-priority nodes, and no restricted size enabled.
func DefaultQuotas() Quotas {
	return Quotas{DefaultCPU: DefaultCPUCores, DefaultGPU: DefaultGPUCores, LowPriorityCores: DefaultLowPriorityCores}
}

// Usage is the cores a workspace's nodes hold now: every node from the moment
// it is launched until it is deprovisioned counts, so that two scale-ups in
// flight cannot both take the last cores.
type Usage struct {
	FamilyCores      map[string]int // dedicated cores by family (keys matched ignoring case)
	LowPriorityCores int
}

// Clone returns a copy of u that can be changed without changing u.
func (u Usage) Clone() Usage {
	return Usage{FamilyCores: maps.Clone(u.FamilyCores), LowPriorityCores: u.LowPriorityCores}
}

// Add counts count more nodes of s in u.
func (u *Usage) Add(s Size, count int, lowPriority bool) {
	if lowPriority {
		u.LowPriorityCores += count * s.VCPUs
		return
	}
	if u.FamilyCores == nil {
		u.FamilyCores = map[string]int{}
	}
	u.FamilyCores[foldKey(u.FamilyCores, s.Family)] += count * s.VCPUs
}

// ErrQuota is wrapped by every QuotaError, for errors.Is.
var ErrQuota = errors.New("quota exceeded")

// ErrRestricted is wrapped by every RestrictedError, for errors.Is.
var ErrRestricted = errors.New("restricted size not enabled")

// QuotaError says a scale-up would pass a core quota. Its message is meant
// for the waiting job's reason, so it is safe to show a user.
type QuotaError struct {
	Family      string // the family's name as the catalog spells it; empty for low priority
	LowPriority bool
	Used, Limit int // cores
	Size        string
	Count       int // nodes asked for
	Need        int // cores those nodes need
}

// Error is the reason a user reads: "quota for family DSv2 is 16/16 cores".
func (e *QuotaError) Error() string {
	what := "quota for family " + ShortFamily(e.Family)
	if e.LowPriority {
		what = "low-priority quota"
	}
	msg := fmt.Sprintf("%s is %d/%d cores", what, e.Used, e.Limit)
	if e.Used < e.Limit { // not full: say why it is still too little
		nodes := "a " + e.Size + " node needs"
		if e.Count > 1 {
			nodes = fmt.Sprintf("%d %s nodes need", e.Count, e.Size)
		}
		msg += fmt.Sprintf("; %s %d", nodes, e.Need)
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// RestrictedError says a size is restricted and this workspace has not
// enabled it.
type RestrictedError struct{ Size string }

// Error says which size and who can enable it.
func (e *RestrictedError) Error() string {
	return fmt.Sprintf("size %s is restricted: an owner must enable it for this workspace before clusters can use it", e.Size)
}

// Unwrap makes errors.Is(err, ErrRestricted) true.
func (e *RestrictedError) Unwrap() error { return ErrRestricted }

// Limit returns the core limit that nodes of s count against and the cores
// of it already used.
func (q Quotas) Limit(u Usage, s Size, lowPriority bool) (limit, used int) {
	if lowPriority {
		return q.LowPriorityCores, u.LowPriorityCores
	}
	limit = q.DefaultCPU
	if s.GPUs > 0 {
		limit = q.DefaultGPU
	}
	if l, ok := lookupFold(q.FamilyCores, s.Family); ok {
		limit = l
	}
	used, _ = lookupFold(u.FamilyCores, s.Family)
	return limit, used
}

// Enabled reports whether s may be used: it is not restricted, or an owner
// enabled it.
func (q Quotas) Enabled(s Size) bool {
	if !s.Restricted {
		return true
	}
	on, _ := lookupFold(q.EnabledSizes, s.Name)
	return on
}

// Check says whether count more nodes of s fit the quotas given the current
// usage: nil, a *RestrictedError, or a *QuotaError whose message is the
// reason a user reads ("quota for family DSv2 is 16/16 cores").
func (q Quotas) Check(u Usage, s Size, count int, lowPriority bool) error {
	if !q.Enabled(s) {
		return &RestrictedError{Size: s.Name}
	}
	limit, used := q.Limit(u, s, lowPriority)
	need := count * s.VCPUs
	if count <= 0 || used+need <= limit {
		return nil
	}
	return &QuotaError{Family: s.Family, LowPriority: lowPriority, Used: used, Limit: limit, Size: s.Name, Count: count, Need: need}
}

// Headroom returns how many more nodes of s the quotas allow, and when that
// is none, the error Check gives for one more node.
func (q Quotas) Headroom(u Usage, s Size, lowPriority bool) (int, error) {
	if !q.Enabled(s) {
		return 0, &RestrictedError{Size: s.Name}
	}
	if s.VCPUs <= 0 {
		// Nodes without cores of their own to count (an attached machine,
		// which the team owns) take nothing from a quota.
		return math.MaxInt32, nil
	}
	limit, used := q.Limit(u, s, lowPriority)
	n := 0
	if limit > used {
		n = (limit - used) / s.VCPUs
	}
	if n == 0 {
		return 0, q.Check(u, s, 1, lowPriority)
	}
	return n, nil
}

// lookupFold finds key in m ignoring case; an exact match wins, and among
// keys that differ only in case the smallest wins, so the answer does not
// depend on map order.
func lookupFold[V any](m map[string]V, key string) (V, bool) {
	k := foldKey(m, key)
	v, ok := m[k]
	return v, ok
}

// foldKey returns the key of m that equals key ignoring case (see
// lookupFold), or key itself when there is none.
func foldKey[V any](m map[string]V, key string) string {
	if _, ok := m[key]; ok {
		return key
	}
	best, found := "", false
	for k := range m {
		if strings.EqualFold(k, key) && (!found || k < best) {
			best, found = k, true
		}
	}
	if !found {
		return key
	}
	return best
}
