package docker

import (
	"fmt"
	"strings"

	"github.com/ferry-ml/ferry/internal/provider"
)

// Settings are what a compute's provider: block says to a docker
// provider: {type: docker, image, network, mounts}.
type Settings struct {
	Image   string   // "" means DefaultImage
	Network string   // "" means DefaultNetwork
	Mounts  []string // "HOST:CONTAINER[:ro|:rw]", checked for form, not for HOST's existence
}

// Keys are the keys a docker provider block may have.
var Keys = []string{"type", "image", "network", "mounts"}

// ParseSettings reads a provider block. It refuses unknown keys and values
// of the wrong type or form, naming the field (provider.mounts[1]). It
// looks at nothing outside the block, so it can check a stored compute
// again after a restart; whether a mount's host path exists is left to New.
func ParseSettings(block map[string]any) (Settings, error) {
	f := provider.Root
	if err := provider.CheckKeys(f, block, Keys...); err != nil {
		return Settings{}, err
	}
	var s Settings
	var err error
	if s.Image, err = provider.String(f, block, "image"); err != nil {
		return Settings{}, err
	}
	if strings.TrimSpace(s.Image) != s.Image || strings.ContainsAny(s.Image, " \t\n") {
		return Settings{}, f.Key("image").Errorf("%q is not an image reference (it has white space)", s.Image)
	}
	if s.Network, err = provider.String(f, block, "network"); err != nil {
		return Settings{}, err
	}
	switch s.Network {
	case "host", "none":
		return Settings{}, f.Key("network").Errorf("nodes need an address of their own, which network %q does not give; name a bridge network or leave it out (%s)", s.Network, DefaultNetwork)
	}
	if s.Mounts, err = provider.Strings(f, block, "mounts"); err != nil {
		return Settings{}, err
	}
	seen := map[string]int{}
	for i, m := range s.Mounts {
		mf := f.Key("mounts").Index(i)
		mm, err := splitMount(m)
		if err != nil {
			return Settings{}, mf.Errorf("%q: %v", m, err)
		}
		if j, ok := seen[mm.Target]; ok {
			return Settings{}, mf.Errorf("%q: %s is already mounted by provider.mounts[%d]", m, mm.Target, j)
		}
		seen[mm.Target] = i
	}
	return s, nil
}

// String is the settings as a key for sharing one provider among the
// computes that configure it alike.
func (s Settings) String() string {
	return fmt.Sprintf("docker\x00%s\x00%s\x00%s", s.Image, s.Network, strings.Join(s.Mounts, "\x00"))
}
