package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, c := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "(devel)"},
		{&debug.BuildInfo{}, true, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/ipamkit/ipam/cmd", Version: "(devel)"}}, true, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/ipamkit/ipam/cmd", Version: "v0.4.0"}}, true, "v0.4.0"},
	} {
		if got := version(c.bi, c.ok); got != c.want {
			t.Errorf("version(%+v, %v) = %q, want %q", c.bi, c.ok, got, c.want)
		}
	}
	if Version() == "" {
		t.Error("Version() is empty")
	}
}
