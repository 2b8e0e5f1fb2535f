package process

import "github.com/ferry-ml/ferry/internal/provider"

// Settings are what a compute's provider: block says to the process
// provider. It has no settings of its own: the server configures it (its
// directory, the host's GPUs, the account jobs run as), so its block is
// {type: process} or absent.
type Settings struct{}

// Keys are the keys a process provider block may have.
var Keys = []string{"type"}

// ParseSettings reads a provider block, refusing any key but type.
func ParseSettings(block map[string]any) (Settings, error) {
	return Settings{}, provider.CheckKeys(provider.Root, block, Keys...)
}
