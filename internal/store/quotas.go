package store

import "context"

// Quotas keeps the workspace's limits on compute sizes: the core limit set
// for a size family, and which restricted sizes are enabled. They hold
// across every compute, so they are not part of one. Its methods are safe
// for concurrent use, and keep the contract common to every part of Store:
// errors wrap ErrNotFound or ErrConflict where those apply, and a returned
// error leaves stored state unchanged.
type Quotas interface {
	// SetQuota sets the core limit of a size family, replacing the default
	// or an earlier limit. The store does not check the number.
	SetQuota(ctx context.Context, family string, cores int) error
	// DeleteQuota puts a family back to its default limit; ErrNotFound if
	// no limit was set for it.
	DeleteQuota(ctx context.Context, family string) error
	// ListQuotas returns every limit set, by family.
	ListQuotas(ctx context.Context) (map[string]int, error)

	// SetSizeEnabled enables or disables a restricted size. Enabling an
	// enabled size or disabling a disabled one is not an error.
	SetSizeEnabled(ctx context.Context, size string, enabled bool) error
	// ListEnabledSizes returns the enabled restricted sizes, sorted.
	ListEnabledSizes(ctx context.Context) ([]string, error)
}
