package exec

import (
	"fmt"
	"strings"

	"github.com/ferry-ml/ferry/internal/provider"
)

// Settings are what a compute's provider: block says to an exec provider:
// {type: exec, program, args}.
type Settings struct {
	Program string   // path or name on PATH; required
	Args    []string // before the verb
}

// Keys are the keys an exec provider block may have.
var Keys = []string{"type", "program", "args"}

// ParseSettings reads a provider block. It refuses unknown keys, a missing
// program and values of the wrong type, naming the field. It does not look
// for the program: a stored compute is checked again after a restart, when
// the program may be installed later.
func ParseSettings(block map[string]any) (Settings, error) {
	f := provider.Root
	if err := provider.CheckKeys(f, block, Keys...); err != nil {
		return Settings{}, err
	}
	var s Settings
	var err error
	if s.Program, err = provider.String(f, block, "program"); err != nil {
		return Settings{}, err
	}
	if strings.TrimSpace(s.Program) == "" {
		return Settings{}, f.Key("program").Errorf("an exec provider needs the program that launches, lists and terminates machines (see docs/providers.md)")
	}
	if s.Args, err = provider.Strings(f, block, "args"); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// String is the settings as a key for sharing one provider among the
// computes that configure it alike.
func (s Settings) String() string {
	return fmt.Sprintf("exec\x00%s\x00%s", s.Program, strings.Join(s.Args, "\x00"))
}
