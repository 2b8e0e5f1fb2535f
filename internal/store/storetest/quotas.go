package storetest

import (
	"context"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/google/go-cmp/cmp"
)

// RunQuotas runs the suite of store.Quotas: size family limits and enabled
// sizes. open is as for Run.
func RunQuotas[S store.Quotas](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Quotas { return open(t) }, []test[store.Quotas]{
		{"Quota/SetListDelete", testQuotaSetListDelete},
		{"Quota/EnabledSizes", testQuotaEnabledSizes},
	})
}

func mustListQuotas(t *testing.T, s store.Quotas) map[string]int {
	t.Helper()
	qs, err := s.ListQuotas(context.Background())
	if err != nil {
		t.Fatalf("ListQuotas: %v", err)
	}
	return qs
}

func testQuotaSetListDelete(t *testing.T, s store.Quotas) {
	ctx := context.Background()
	if qs := mustListQuotas(t, s); qs == nil || len(qs) != 0 {
		t.Errorf("ListQuotas on an empty store = %#v, want an empty, non-nil map", qs)
	}
	for _, q := range []struct {
		family string
		cores  int
	}{{"NCadsA100v4", 96}, {"Dv5", 0}, {"NCadsA100v4", 48}, {"ESv5", 200}} {
		if err := s.SetQuota(ctx, q.family, q.cores); err != nil {
			t.Fatalf("SetQuota(%q, %d): %v", q.family, q.cores, err)
		}
	}
	if d := diff(map[string]int{"NCadsA100v4": 48, "Dv5": 0, "ESv5": 200}, mustListQuotas(t, s)); d != "" {
		t.Errorf("ListQuotas (-want +got):\n%s", d)
	}
	if err := s.DeleteQuota(ctx, "Dv5"); err != nil {
		t.Fatalf("DeleteQuota: %v", err)
	}
	wantErrIs(t, "second DeleteQuota", s.DeleteQuota(ctx, "Dv5"), store.ErrNotFound)
	wantErrIs(t, "DeleteQuota of a family never set", s.DeleteQuota(ctx, "nope"), store.ErrNotFound)
	if d := diff(map[string]int{"NCadsA100v4": 48, "ESv5": 200}, mustListQuotas(t, s)); d != "" {
		t.Errorf("ListQuotas after DeleteQuota (-want +got):\n%s", d)
	}
}

func testQuotaEnabledSizes(t *testing.T, s store.Quotas) {
	ctx := context.Background()
	list := func() []string {
		t.Helper()
		sizes, err := s.ListEnabledSizes(ctx)
		if err != nil {
			t.Fatalf("ListEnabledSizes: %v", err)
		}
		return sizes
	}
	if sizes := list(); sizes == nil || len(sizes) != 0 {
		t.Errorf("ListEnabledSizes on an empty store = %#v, want an empty, non-nil slice", sizes)
	}
	for _, op := range []struct {
		size    string
		enabled bool
	}{
		{"Standard_ND96asr_v4", true},
		{"Standard_NC6", false}, // never enabled
		{"Standard_M128", true},
		{"Standard_ND96asr_v4", true}, // twice
		{"Standard_HB120rs_v3", true},
		{"Standard_M128", false},
		{"Standard_M128", false}, // twice
		{"Standard_HB120rs_v2", true},
	} {
		if err := s.SetSizeEnabled(ctx, op.size, op.enabled); err != nil {
			t.Fatalf("SetSizeEnabled(%q, %t): %v", op.size, op.enabled, err)
		}
	}
	if d := cmp.Diff([]string{"Standard_HB120rs_v2", "Standard_HB120rs_v3", "Standard_ND96asr_v4"}, list()); d != "" {
		t.Errorf("ListEnabledSizes (-want +got):\n%s", d)
	}
}
