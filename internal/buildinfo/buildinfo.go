// Package buildinfo says which build of ferry this binary is, from what
// the Go toolchain recorded in it. It imports nothing of Ferry's, so the
// agent on a node and the command line read their versions the same way.
package buildinfo

import "runtime/debug"

// Info is what the toolchain recorded about the build.
type Info struct {
	Module   string // the module version: a tag, or "(devel)" from a checkout
	Revision string // the VCS commit, empty when built outside one
	Modified bool   // the tree had changes the commit lacks
	Go       string // the Go that built it
	Known    bool   // false when the binary has no module information
}

// Read returns the build information of this binary.
func Read() Info {
	return fromDebug(debug.ReadBuildInfo())
}

func fromDebug(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{}
	}
	i := Info{Module: bi.Main.Version, Go: bi.GoVersion, Known: true}
	if i.Module == "" {
		i.Module = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// ShortRevision is the first 12 characters of the commit.
func (i Info) ShortRevision() string {
	return i.Revision[:min(12, len(i.Revision))]
}
