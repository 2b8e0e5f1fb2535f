package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// LowPriorityQuota is the name of the quota of low-priority cores, all
// families together: `ferry quota set lowPriority 48`.
const LowPriorityQuota = "lowPriority"

// ListQuotas returns the core quota and use of every family the catalog has.
func (nd *Nodes) ListQuotas(ctx context.Context) ([]apitypes.Quota, error) {
	q, err := loadQuotas(ctx, nd.ws.st)
	if err != nil {
		return nil, err
	}
	set, err := nd.ws.st.ListQuotas(ctx)
	if err != nil {
		return nil, err
	}
	usage, err := nd.usage(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []apitypes.Quota
	for _, sz := range nd.ws.cfg.Sizes.List() {
		if seen[sz.Family] {
			continue
		}
		seen[sz.Family] = true
		limit, used := q.Limit(usage, sz, false)
		_, isSet := set[sz.Family]
		out = append(out, apitypes.Quota{Family: sz.Family, Limit: limit, Used: used, Set: isSet})
	}
	slices.SortFunc(out, func(a, b apitypes.Quota) int { return strings.Compare(a.Family, b.Family) })
	_, isSet := set[LowPriorityQuota]
	out = append(out, apitypes.Quota{Family: LowPriorityQuota, Limit: q.LowPriorityCores, Used: usage.LowPriorityCores, Set: isSet, LowPriority: true})
	return out, nil
}

// SetQuota sets a family's core quota.
func (nd *Nodes) SetQuota(ctx context.Context, who auth.Principal, family string, cores int) error {
	if !who.IsOwner() {
		return apperr.Forbidden("only an owner may set quotas")
	}
	if strings.EqualFold(family, LowPriorityQuota) {
		if cores < 0 {
			return apperr.Invalid("cores: a quota is a number of cores, 0 or more (got %d)", cores)
		}
		if err := nd.ws.st.SetQuota(ctx, LowPriorityQuota, cores); err != nil {
			return err
		}
		nd.ws.wakeDispatcher()
		return nil
	}
	known := false
	var families []string
	for _, sz := range nd.ws.cfg.Sizes.List() {
		known = known || strings.EqualFold(sz.Family, family)
		if strings.EqualFold(sz.Family, family) {
			family = sz.Family
		}
		if !slices.Contains(families, sz.Family) {
			families = append(families, sz.Family)
		}
	}
	if !known {
		families = append(families, LowPriorityQuota)
		msg := fmt.Sprintf("family: %q is not a family of any size in the catalog, nor %s", family, LowPriorityQuota)
		if close := spec.Suggest(family, families); close != "" {
			msg += fmt.Sprintf("; did you mean %s?", close)
		}
		return apperr.Invalid("%s", msg)
	}
	if cores < 0 || cores > spec.MaxQuotaCores {
		return apperr.Invalid("cores: a quota is a number of cores from 0 to %d (got %d)", spec.MaxQuotaCores, cores)
	}
	if err := nd.ws.st.SetQuota(ctx, family, cores); err != nil {
		return err
	}
	nd.ws.wakeDispatcher()
	return nil
}

// EnableSize lets clusters of a restricted size be made.
func (nd *Nodes) EnableSize(ctx context.Context, who auth.Principal, size string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("only an owner may enable restricted sizes")
	}
	sz, ok := nd.ws.cfg.Sizes.Lookup(size)
	if !ok {
		return apperr.Invalid("size: %q is not in the size catalog; see `ferry size list`", size)
	}
	return nd.ws.st.SetSizeEnabled(ctx, sz.Name, true)
}

// usage is the cores every pool node of the workspace holds: per family
// for dedicated nodes, together for low-priority ones.
func (nd *Nodes) usage(ctx context.Context) (sizes.Usage, error) {
	u := sizes.Usage{FamilyCores: map[string]int{}}
	nodes, err := nd.ws.st.ListNodes(ctx, "")
	if err != nil {
		return u, err
	}
	recs, err := nd.ws.st.ListComputes(ctx)
	if err != nil {
		return u, err
	}
	low := map[string]bool{}
	for _, r := range recs {
		var c spec.Compute
		if json.Unmarshal(r.Spec, &c) == nil && lowPriority(&c) {
			low[r.Name] = true
		}
	}
	for _, n := range nodes {
		if sz, ok := nd.ws.cfg.Sizes.Lookup(n.Size); ok {
			u.Add(sz, 1, low[n.Compute])
		}
	}
	return u, nil
}

// loadQuotas are the default quotas with the workspace's overrides.
func loadQuotas(ctx context.Context, st store.Store) (sizes.Quotas, error) {
	q := sizes.DefaultQuotas()
	set, err := st.ListQuotas(ctx)
	if err != nil {
		return q, err
	}
	if q.FamilyCores == nil {
		q.FamilyCores = map[string]int{}
	}
	for f, n := range set {
		if f == LowPriorityQuota {
			q.LowPriorityCores = n
			continue
		}
		q.FamilyCores[f] = n
	}
	enabled, err := st.ListEnabledSizes(ctx)
	if err != nil {
		return q, err
	}
	if q.EnabledSizes == nil {
		q.EnabledSizes = map[string]bool{}
	}
	for _, e := range enabled {
		q.EnabledSizes[e] = true
	}
	return q, nil
}
