package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromDebug(t *testing.T) {
	if got := fromDebug(nil, false); got.Known {
		t.Errorf("no build info read as known: %+v", got)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: ""}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := fromDebug(bi, true)
	want := Info{Module: "(devel)", Revision: "0123456789abcdef0123", Modified: true, Go: "go1.26", Known: true}
	if got != want {
		t.Errorf("fromDebug = %+v, want %+v", got, want)
	}
	if s := got.ShortRevision(); s != "0123456789ab" {
		t.Errorf("ShortRevision = %q", s)
	}
	if s := (Info{Revision: "abc"}).ShortRevision(); s != "abc" {
		t.Errorf("ShortRevision of a short revision = %q", s)
	}
}
