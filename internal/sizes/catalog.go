package sizes

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Size is a named node shape. The JSON and YAML names are those of the
// server config's sizes list.
type Size struct {
	Name      string  `json:"name" yaml:"name"`
	VCPUs     int     `json:"vcpus" yaml:"vcpus"`
	MemoryGiB float64 `json:"memory_gib" yaml:"memory_gib"`
	GPUs      int     `json:"gpus,omitempty" yaml:"gpus,omitempty"`
	GPUType   string  `json:"gpu_type,omitempty" yaml:"gpu_type,omitempty"`
	// Family names the quota the size's cores count against, spelled as
	// Azure spells its quota families (standardDSv2Family).
	Family string `json:"family,omitempty" yaml:"family,omitempty"`
	// PricePerHour is in US dollars; for the built-in sizes it is an
	// approximate Azure list price, there to compare costs, not to bill.
	PricePerHour float64 `json:"price_per_hour,omitempty" yaml:"price_per_hour,omitempty"`
	// Restricted sizes can be used only after an owner enables them for the
	// workspace (Quotas.EnabledSizes), as Azure gates its scarcest GPUs.
	Restricted bool `json:"restricted,omitempty" yaml:"restricted,omitempty"`
}

// MemoryBytes is the size's memory in bytes.
func (s Size) MemoryBytes() int64 { return int64(math.Round(s.MemoryGiB * (1 << 30))) }

// CustomFamily is the family of a configured size that names none, so that
// sizes a team adds share one quota unless it says otherwise.
const CustomFamily = "custom"

// Catalog is a set of sizes looked up by name, case-insensitively as Azure
// does (STANDARD_DS3_V2 is Standard_DS3_v2). A Catalog is immutable once
// made, so it is safe for concurrent use.
type Catalog struct {
	byKey map[string]Size // by lower-cased name
}

// Builtin returns the built-in catalog: the common Azure sizes with their
// real shapes and approximate pay-as-you-go Linux prices (US East, USD per
// hour, rounded; they drift and differ by region).
func Builtin() *Catalog {
	c := &Catalog{byKey: make(map[string]Size, len(builtin))}
	for _, s := range builtin {
		c.byKey[strings.ToLower(s.Name)] = s
	}
	return c
}

// Lookup finds a size by name, ignoring case.
func (c *Catalog) Lookup(name string) (Size, bool) {
	s, ok := c.byKey[strings.ToLower(strings.TrimSpace(name))]
	return s, ok
}

// List returns every size, ordered by name ignoring case.
func (c *Catalog) List() []Size {
	out := make([]Size, 0, len(c.byKey))
	for _, s := range c.byKey {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Size) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return out
}

// Extend returns a new catalog with the given sizes added; one whose name
// matches an existing size (ignoring case) replaces it whole, so a team can
// correct a shape or a price. A size without a family gets CustomFamily.
// Every invalid entry is reported, each error naming the entry and the field
// as the config spells it; on error the catalog is unchanged and nil is
// returned. c itself is never modified.
func (c *Catalog) Extend(sizes []Size) (*Catalog, error) {
	var errs []error
	seen := make(map[string]int, len(sizes))
	for i, s := range sizes {
		errs = append(errs, validate(i, s)...)
		key := strings.ToLower(strings.TrimSpace(s.Name))
		if key == "" {
			continue
		}
		if j, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("sizes[%d].name: %q is already defined by sizes[%d]", i, s.Name, j))
		}
		seen[key] = i
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := &Catalog{byKey: make(map[string]Size, len(c.byKey)+len(sizes))}
	for k, s := range c.byKey {
		out.byKey[k] = s
	}
	for _, s := range sizes {
		s.Name = strings.TrimSpace(s.Name)
		if s.Family == "" {
			s.Family = CustomFamily
		}
		out.byKey[strings.ToLower(s.Name)] = s
	}
	return out, nil
}

func validate(i int, s Size) []error {
	at := fmt.Sprintf("sizes[%d]", i)
	if name := strings.TrimSpace(s.Name); name == "" {
		return []error{fmt.Errorf("%s.name: required (a size name such as Standard_DS3_v2)", at)}
	} else if strings.ContainsAny(name, " \t\n/") {
		return []error{fmt.Errorf("%s.name: %q must not contain spaces or slashes", at, name)}
	}
	at = fmt.Sprintf("sizes[%d] (%s)", i, strings.TrimSpace(s.Name))
	var errs []error
	if s.VCPUs <= 0 {
		errs = append(errs, fmt.Errorf("%s: vcpus must be > 0 (got %d)", at, s.VCPUs))
	}
	if !(s.MemoryGiB > 0) || math.IsInf(s.MemoryGiB, 0) {
		errs = append(errs, fmt.Errorf("%s: memory_gib must be > 0 (got %v)", at, s.MemoryGiB))
	}
	if s.GPUs < 0 {
		errs = append(errs, fmt.Errorf("%s: gpus must be ≥ 0 (got %d)", at, s.GPUs))
	}
	if s.GPUType != "" && s.GPUs == 0 {
		errs = append(errs, fmt.Errorf("%s: gpu_type %q given but gpus is 0", at, s.GPUType))
	}
	if s.PricePerHour < 0 || math.IsNaN(s.PricePerHour) || math.IsInf(s.PricePerHour, 0) {
		errs = append(errs, fmt.Errorf("%s: price_per_hour must be ≥ 0 (got %v)", at, s.PricePerHour))
	}
	return errs
}

// ShortFamily is how messages name a family: standardDSv2Family is DSv2,
// as the Azure portal's quota page reads.
func ShortFamily(family string) string {
	f := family
	if len(f) > len("standard") && strings.EqualFold(f[:len("standard")], "standard") {
		f = f[len("standard"):]
	}
	if len(f) > len("family") && strings.EqualFold(f[len(f)-len("family"):], "family") {
		f = f[:len(f)-len("family")]
	}
	return f
}

// builtin lists the sizes every Ferry knows. Shapes are Azure's; prices are
// approximate list prices (see Builtin).
var builtin = []Size{
	// General purpose, Dv2 and DSv2: the Azure ML examples' defaults.
	{Name: "Standard_D1_v2", VCPUs: 1, MemoryGiB: 3.5, Family: "standardDv2Family", PricePerHour: 0.057},
	{Name: "Standard_D2_v2", VCPUs: 2, MemoryGiB: 7, Family: "standardDv2Family", PricePerHour: 0.114},
	{Name: "Standard_D3_v2", VCPUs: 4, MemoryGiB: 14, Family: "standardDv2Family", PricePerHour: 0.229},
	{Name: "Standard_D4_v2", VCPUs: 8, MemoryGiB: 28, Family: "standardDv2Family", PricePerHour: 0.458},
	{Name: "Standard_D5_v2", VCPUs: 16, MemoryGiB: 56, Family: "standardDv2Family", PricePerHour: 0.916},
	{Name: "Standard_DS1_v2", VCPUs: 1, MemoryGiB: 3.5, Family: "standardDSv2Family", PricePerHour: 0.073},
	{Name: "Standard_DS2_v2", VCPUs: 2, MemoryGiB: 7, Family: "standardDSv2Family", PricePerHour: 0.146},
	{Name: "Standard_DS3_v2", VCPUs: 4, MemoryGiB: 14, Family: "standardDSv2Family", PricePerHour: 0.293},
	{Name: "Standard_DS4_v2", VCPUs: 8, MemoryGiB: 28, Family: "standardDSv2Family", PricePerHour: 0.585},
	{Name: "Standard_DS5_v2", VCPUs: 16, MemoryGiB: 56, Family: "standardDSv2Family", PricePerHour: 1.17},
	// General purpose, Dsv3.
	{Name: "Standard_D2s_v3", VCPUs: 2, MemoryGiB: 8, Family: "standardDSv3Family", PricePerHour: 0.096},
	{Name: "Standard_D4s_v3", VCPUs: 4, MemoryGiB: 16, Family: "standardDSv3Family", PricePerHour: 0.192},
	{Name: "Standard_D8s_v3", VCPUs: 8, MemoryGiB: 32, Family: "standardDSv3Family", PricePerHour: 0.384},
	{Name: "Standard_D16s_v3", VCPUs: 16, MemoryGiB: 64, Family: "standardDSv3Family", PricePerHour: 0.768},
	{Name: "Standard_D32s_v3", VCPUs: 32, MemoryGiB: 128, Family: "standardDSv3Family", PricePerHour: 1.536},
	{Name: "Standard_D64s_v3", VCPUs: 64, MemoryGiB: 256, Family: "standardDSv3Family", PricePerHour: 3.072},
	// Memory optimised, Esv3.
	{Name: "Standard_E2s_v3", VCPUs: 2, MemoryGiB: 16, Family: "standardESv3Family", PricePerHour: 0.126},
	{Name: "Standard_E4s_v3", VCPUs: 4, MemoryGiB: 32, Family: "standardESv3Family", PricePerHour: 0.252},
	{Name: "Standard_E8s_v3", VCPUs: 8, MemoryGiB: 64, Family: "standardESv3Family", PricePerHour: 0.504},
	{Name: "Standard_E16s_v3", VCPUs: 16, MemoryGiB: 128, Family: "standardESv3Family", PricePerHour: 1.008},
	{Name: "Standard_E32s_v3", VCPUs: 32, MemoryGiB: 256, Family: "standardESv3Family", PricePerHour: 2.016},
	// Compute optimised, Fsv2.
	{Name: "Standard_F2s_v2", VCPUs: 2, MemoryGiB: 4, Family: "standardFSv2Family", PricePerHour: 0.085},
	{Name: "Standard_F4s_v2", VCPUs: 4, MemoryGiB: 8, Family: "standardFSv2Family", PricePerHour: 0.169},
	{Name: "Standard_F8s_v2", VCPUs: 8, MemoryGiB: 16, Family: "standardFSv2Family", PricePerHour: 0.338},
	{Name: "Standard_F16s_v2", VCPUs: 16, MemoryGiB: 32, Family: "standardFSv2Family", PricePerHour: 0.677},
	{Name: "Standard_F32s_v2", VCPUs: 32, MemoryGiB: 64, Family: "standardFSv2Family", PricePerHour: 1.353},
	{Name: "Standard_F72s_v2", VCPUs: 72, MemoryGiB: 144, Family: "standardFSv2Family", PricePerHour: 3.045},
	// GPU: NC (K80; retired by Azure in 2023 but still in many compute files).
	{Name: "Standard_NC6", VCPUs: 6, MemoryGiB: 56, GPUs: 1, GPUType: "K80", Family: "standardNCFamily", PricePerHour: 0.90},
	{Name: "Standard_NC12", VCPUs: 12, MemoryGiB: 112, GPUs: 2, GPUType: "K80", Family: "standardNCFamily", PricePerHour: 1.80},
	{Name: "Standard_NC24", VCPUs: 24, MemoryGiB: 224, GPUs: 4, GPUType: "K80", Family: "standardNCFamily", PricePerHour: 3.60},
	// GPU: NCv3 (V100 16 GB).
	{Name: "Standard_NC6s_v3", VCPUs: 6, MemoryGiB: 112, GPUs: 1, GPUType: "V100", Family: "standardNCSv3Family", PricePerHour: 3.06},
	{Name: "Standard_NC12s_v3", VCPUs: 12, MemoryGiB: 224, GPUs: 2, GPUType: "V100", Family: "standardNCSv3Family", PricePerHour: 6.12},
	{Name: "Standard_NC24s_v3", VCPUs: 24, MemoryGiB: 448, GPUs: 4, GPUType: "V100", Family: "standardNCSv3Family", PricePerHour: 12.24},
	// GPU: NCasT4_v3 (T4).
	{Name: "Standard_NC4as_T4_v3", VCPUs: 4, MemoryGiB: 28, GPUs: 1, GPUType: "T4", Family: "standardNCASv3_T4Family", PricePerHour: 0.526},
	{Name: "Standard_NC8as_T4_v3", VCPUs: 8, MemoryGiB: 56, GPUs: 1, GPUType: "T4", Family: "standardNCASv3_T4Family", PricePerHour: 0.752},
	{Name: "Standard_NC16as_T4_v3", VCPUs: 16, MemoryGiB: 110, GPUs: 1, GPUType: "T4", Family: "standardNCASv3_T4Family", PricePerHour: 1.204},
	{Name: "Standard_NC64as_T4_v3", VCPUs: 64, MemoryGiB: 440, GPUs: 4, GPUType: "T4", Family: "standardNCASv3_T4Family", PricePerHour: 4.352},
	// GPU: NC A100 v4 (A100 80 GB, PCIe).
	{Name: "Standard_NC24ads_A100_v4", VCPUs: 24, MemoryGiB: 220, GPUs: 1, GPUType: "A100", Family: "standardNCADSA100v4Family", PricePerHour: 3.67},
	{Name: "Standard_NC48ads_A100_v4", VCPUs: 48, MemoryGiB: 440, GPUs: 2, GPUType: "A100", Family: "standardNCADSA100v4Family", PricePerHour: 7.35},
	{Name: "Standard_NC96ads_A100_v4", VCPUs: 96, MemoryGiB: 880, GPUs: 4, GPUType: "A100", Family: "standardNCADSA100v4Family", PricePerHour: 14.69},
	// GPU: ND, the multi-GPU training machines with InfiniBand.
	{Name: "Standard_ND40rs_v2", VCPUs: 40, MemoryGiB: 672, GPUs: 8, GPUType: "V100", Family: "standardNDSv2Family", PricePerHour: 22.03},
	{Name: "Standard_ND96asr_v4", VCPUs: 96, MemoryGiB: 900, GPUs: 8, GPUType: "A100", Family: "standardNDASv4_A100Family", PricePerHour: 27.20, Restricted: true},
	{Name: "Standard_ND96amsr_A100_v4", VCPUs: 96, MemoryGiB: 1900, GPUs: 8, GPUType: "A100", Family: "standardNDAMSv4_A100Family", PricePerHour: 32.77, Restricted: true},
	{Name: "Standard_ND96isr_H100_v5", VCPUs: 96, MemoryGiB: 1900, GPUs: 8, GPUType: "H100", Family: "standardNDSH100v5Family", PricePerHour: 98.32, Restricted: true},
}
