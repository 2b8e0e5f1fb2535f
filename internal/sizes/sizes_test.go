package sizes

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuiltinShapes(t *testing.T) {
	c := Builtin()
	for _, want := range []Size{
		{Name: "Standard_DS3_v2", VCPUs: 4, MemoryGiB: 14, Family: "standardDSv2Family", PricePerHour: 0.293},
		{Name: "Standard_NC6", VCPUs: 6, MemoryGiB: 56, GPUs: 1, GPUType: "K80", Family: "standardNCFamily", PricePerHour: 0.90},
		{Name: "Standard_NC24s_v3", VCPUs: 24, MemoryGiB: 448, GPUs: 4, GPUType: "V100", Family: "standardNCSv3Family", PricePerHour: 12.24},
		{Name: "Standard_NC4as_T4_v3", VCPUs: 4, MemoryGiB: 28, GPUs: 1, GPUType: "T4", Family: "standardNCASv3_T4Family", PricePerHour: 0.526},
		{Name: "Standard_ND96asr_v4", VCPUs: 96, MemoryGiB: 900, GPUs: 8, GPUType: "A100", Family: "standardNDASv4_A100Family", PricePerHour: 27.20, Restricted: true},
	} {
		got, ok := c.Lookup(want.Name)
		if !ok {
			t.Errorf("Lookup(%q): not found", want.Name)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Lookup(%q) (-want +got):\n%s", want.Name, diff)
		}
	}
	for _, name := range []string{
		"Standard_DS1_v2", "Standard_DS2_v2", "Standard_DS4_v2", "Standard_DS5_v2",
		"Standard_D2s_v3", "Standard_D4s_v3", "Standard_D8s_v3", "Standard_D16s_v3",
		"Standard_E4s_v3", "Standard_F4s_v2", "Standard_NC6s_v3", "Standard_NC12s_v3",
		"Standard_NC64as_T4_v3", "Standard_ND40rs_v2", "Standard_NC24ads_A100_v4", "Standard_D2_v2",
	} {
		if _, ok := c.Lookup(name); !ok {
			t.Errorf("Lookup(%q): not in the built-in catalog", name)
		}
	}
}

func TestBuiltinIsConsistent(t *testing.T) {
	list := Builtin().List()
	if len(list) != len(builtin) {
		t.Fatalf("List has %d sizes, builtin %d: a name is listed twice", len(list), len(builtin))
	}
	for i, s := range list {
		if errs := validate(i, s); len(errs) > 0 {
			t.Errorf("%s: %v", s.Name, errs)
		}
		if !strings.HasPrefix(s.Family, "standard") || !strings.HasSuffix(s.Family, "Family") {
			t.Errorf("%s: family %q is not spelled as Azure's quota families are", s.Name, s.Family)
		}
		if (s.GPUs > 0) != (s.GPUType != "") {
			t.Errorf("%s: gpus %d but gpu_type %q", s.Name, s.GPUs, s.GPUType)
		}
		if s.PricePerHour <= 0 {
			t.Errorf("%s: no price", s.Name)
		}
		if i > 0 && strings.ToLower(list[i-1].Name) >= strings.ToLower(s.Name) {
			t.Errorf("List not ordered by name: %s before %s", list[i-1].Name, s.Name)
		}
	}
}

func TestLookupIgnoresCase(t *testing.T) {
	c := Builtin()
	for _, name := range []string{"STANDARD_DS3_V2", "standard_ds3_v2", " Standard_DS3_v2 "} {
		s, ok := c.Lookup(name)
		if !ok || s.Name != "Standard_DS3_v2" {
			t.Errorf("Lookup(%q) = %q, %v; want Standard_DS3_v2", name, s.Name, ok)
		}
	}
	if _, ok := c.Lookup("Standard_Nope"); ok {
		t.Error("Lookup found a size that does not exist")
	}
}

func TestMemoryBytes(t *testing.T) {
	if got, want := (Size{MemoryGiB: 3.5}).MemoryBytes(), int64(3584)<<20; got != want {
		t.Errorf("MemoryBytes = %d, want %d", got, want)
	}
}

func TestExtendAddsAndOverrides(t *testing.T) {
	base := Builtin()
	c, err := base.Extend([]Size{
		{Name: "box-a100", VCPUs: 64, MemoryGiB: 512, GPUs: 4, GPUType: "A100"},
		{Name: "standard_ds3_v2", VCPUs: 4, MemoryGiB: 16, Family: "standardDSv2Family", PricePerHour: 0.1},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.Lookup("BOX-A100")
	if diff := cmp.Diff(Size{Name: "box-a100", VCPUs: 64, MemoryGiB: 512, GPUs: 4, GPUType: "A100", Family: CustomFamily}, got); diff != "" {
		t.Errorf("added size (-want +got):\n%s", diff)
	}
	if got, _ := c.Lookup("Standard_DS3_v2"); got.MemoryGiB != 16 || got.PricePerHour != 0.1 {
		t.Errorf("override not applied: %+v", got)
	}
	if got, _ := base.Lookup("Standard_DS3_v2"); got.MemoryGiB != 14 {
		t.Errorf("Extend changed the catalog it extends: %+v", got)
	}
	if len(c.List()) != len(base.List())+1 {
		t.Errorf("override added a size instead of replacing one: %d vs %d", len(c.List()), len(base.List()))
	}
}

func TestExtendNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []Size
		want []string
	}{
		{"no name", []Size{{VCPUs: 1, MemoryGiB: 1}}, []string{"sizes[0].name: required"}},
		{"name with space", []Size{{Name: "a b", VCPUs: 1, MemoryGiB: 1}}, []string{`sizes[0].name: "a b" must not contain spaces`}},
		{"vcpus", []Size{{Name: "x", MemoryGiB: 1}}, []string{"sizes[0] (x): vcpus must be > 0 (got 0)"}},
		{"memory", []Size{{Name: "x", VCPUs: 2, MemoryGiB: -1}}, []string{"sizes[0] (x): memory_gib must be > 0 (got -1)"}},
		{"gpus", []Size{{Name: "x", VCPUs: 2, MemoryGiB: 1, GPUs: -1}}, []string{"sizes[0] (x): gpus must be ≥ 0 (got -1)"}},
		{"gpu type without gpus", []Size{{Name: "x", VCPUs: 2, MemoryGiB: 1, GPUType: "T4"}}, []string{`gpu_type "T4" given but gpus is 0`}},
		{"price", []Size{{Name: "x", VCPUs: 2, MemoryGiB: 1, PricePerHour: -2}}, []string{"price_per_hour must be ≥ 0"}},
		{"duplicate", []Size{{Name: "x", VCPUs: 1, MemoryGiB: 1}, {Name: "X", VCPUs: 1, MemoryGiB: 1}}, []string{`sizes[1].name: "X" is already defined by sizes[0]`}},
		{"every error at once", []Size{{Name: "x"}, {VCPUs: 1}}, []string{"sizes[0] (x): vcpus", "sizes[0] (x): memory_gib", "sizes[1].name: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Builtin().Extend(tc.in)
			if err == nil {
				t.Fatalf("Extend(%+v) = nil error", tc.in)
			}
			if c != nil {
				t.Error("Extend returned a catalog along with an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestShortFamily(t *testing.T) {
	for in, want := range map[string]string{
		"standardDSv2Family":      "DSv2",
		"standardNCASv3_T4Family": "NCASv3_T4",
		"StandardNCFamily":        "NC",
		"custom":                  "custom",
		"family":                  "family",
	} {
		if got := ShortFamily(in); got != want {
			t.Errorf("ShortFamily(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestQuotaCheck(t *testing.T) {
	c := Builtin()
	ds3, _ := c.Lookup("Standard_DS3_v2")
	nc6, _ := c.Lookup("Standard_NC6")
	nd, _ := c.Lookup("Standard_ND96asr_v4")
	q := DefaultQuotas()
	q.FamilyCores = map[string]int{"standardDSv2Family": 16}
	for _, tc := range []struct {
		name  string
		usage Usage
		size  Size
		count int
		low   bool
		want  string // "" for nil
	}{
		{"fits exactly", Usage{FamilyCores: map[string]int{"standardDSv2Family": 12}}, ds3, 1, false, ""},
		{"full", Usage{FamilyCores: map[string]int{"standardDSv2Family": 16}}, ds3, 1, false, "quota for family DSv2 is 16/16 cores"},
		{"not full but too little", Usage{FamilyCores: map[string]int{"standardDSv2Family": 14}}, ds3, 1, false, "quota for family DSv2 is 14/16 cores; a Standard_DS3_v2 node needs 4"},
		{"several nodes", Usage{FamilyCores: map[string]int{"standardDSv2Family": 8}}, ds3, 3, false, "quota for family DSv2 is 8/16 cores; 3 Standard_DS3_v2 nodes need 12"},
		{"family keys ignore case", Usage{FamilyCores: map[string]int{"STANDARDDSV2FAMILY": 16}}, ds3, 1, false, "quota for family DSv2 is 16/16 cores"},
		{"other family unaffected", Usage{FamilyCores: map[string]int{"standardDSv2Family": 16}}, nc6, 4, false, ""},
		{"GPU family default", Usage{FamilyCores: map[string]int{"standardNCFamily": 24}}, nc6, 1, false, "quota for family NC is 24/24 cores"},
		{"low priority is one quota across families", Usage{LowPriorityCores: 98, FamilyCores: map[string]int{"standardDSv2Family": 16}}, ds3, 1, true, "low-priority quota is 98/100 cores; a Standard_DS3_v2 node needs 4"},
		{"low priority ignores the family quota", Usage{LowPriorityCores: 0, FamilyCores: map[string]int{"standardDSv2Family": 16}}, ds3, 2, true, ""},
		{"restricted", Usage{}, nd, 1, false, "size Standard_ND96asr_v4 is restricted: an owner must enable it"},
		{"zero nodes always fit", Usage{FamilyCores: map[string]int{"standardDSv2Family": 99}}, ds3, 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := q.Check(tc.usage, tc.size, tc.count, tc.low)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestQuotaErrorsAreTyped(t *testing.T) {
	c := Builtin()
	ds3, _ := c.Lookup("Standard_DS3_v2")
	nd, _ := c.Lookup("standard_nd96asr_v4")
	q := Quotas{} // the zero Quotas allows nothing
	err := q.Check(Usage{}, ds3, 1, false)
	var qe *QuotaError
	if !errors.Is(err, ErrQuota) || !errors.As(err, &qe) || qe.Limit != 0 {
		t.Errorf("zero Quotas: %v, want a QuotaError with limit 0", err)
	}
	err = q.Check(Usage{}, nd, 1, false)
	if !errors.Is(err, ErrRestricted) {
		t.Errorf("restricted: %v, want ErrRestricted", err)
	}
	q = DefaultQuotas()
	q.EnabledSizes = map[string]bool{"STANDARD_ND96ASR_V4": true}
	q.FamilyCores = map[string]int{"standardNDASv4_A100Family": 192}
	if err := q.Check(Usage{}, nd, 2, false); err != nil {
		t.Errorf("enabled restricted size with quota: %v", err)
	}
}

func TestHeadroom(t *testing.T) {
	c := Builtin()
	ds3, _ := c.Lookup("Standard_DS3_v2")
	nd, _ := c.Lookup("Standard_ND96asr_v4")
	q := DefaultQuotas()
	q.FamilyCores = map[string]int{"standardDSv2Family": 16}
	for _, tc := range []struct {
		used int
		want int
	}{{0, 4}, {4, 3}, {13, 0}, {16, 0}, {40, 0}} {
		n, err := q.Headroom(Usage{FamilyCores: map[string]int{"standardDSv2Family": tc.used}}, ds3, false)
		if n != tc.want {
			t.Errorf("used %d: Headroom = %d, want %d", tc.used, n, tc.want)
		}
		if (n == 0) != errors.Is(err, ErrQuota) {
			t.Errorf("used %d: Headroom error %v", tc.used, err)
		}
	}
	if n, err := q.Headroom(Usage{}, nd, false); n != 0 || !errors.Is(err, ErrRestricted) {
		t.Errorf("restricted: Headroom = %d, %v", n, err)
	}
}

func TestUsageAddAndClone(t *testing.T) {
	c := Builtin()
	ds3, _ := c.Lookup("Standard_DS3_v2")
	u := Usage{FamilyCores: map[string]int{"STANDARDDSV2FAMILY": 4}}
	v := u.Clone()
	v.Add(ds3, 2, false)
	v.Add(ds3, 1, true)
	if diff := cmp.Diff(Usage{FamilyCores: map[string]int{"STANDARDDSV2FAMILY": 12}, LowPriorityCores: 4}, v); diff != "" {
		t.Errorf("after Add (-want +got):\n%s", diff)
	}
	if u.FamilyCores["STANDARDDSV2FAMILY"] != 4 {
		t.Error("Add on a clone changed the original")
	}
	var z Usage
	z.Add(ds3, 1, false)
	if z.FamilyCores["standardDSv2Family"] != 4 {
		t.Errorf("Add on the zero Usage: %+v", z)
	}
}
