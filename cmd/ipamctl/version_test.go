package main

import (
	"testing"

	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
)

func TestVersionCommand(t *testing.T) {
	stdout, stderr, code := runCmd(t, "version")
	if want := "ipamctl " + buildinfo.Version() + "\n"; code != exitOK || stdout != want || stderr != "" {
		t.Errorf("ipamctl version: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, stdout, stderr, want)
	}
}
