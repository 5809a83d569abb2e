//go:build linux

package filestore

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// FuzzParseState checks that any .state target parses without panicking, and
// that one that parses is written back the same.
func FuzzParseState(f *testing.F) {
	f.Add("ipam-owner-index/1 boot=3ced6dc1-4be8-47c8-9fef-396424c4e1a0 dir=64768:1234 index=5678 mtime=1000000000307804636,1000000000968560718")
	f.Add("ipam-owner-index/1 boot= dir=1:2 index=3 mtime=4,5")
	f.Add("ipam-owner-index/1 garbage")
	f.Add("ipam-owner-index/2 boot=x dir=1:2 index=3 mtime=4,5")
	f.Fuzz(func(t *testing.T, target string) {
		st, bad := parseState(target)
		if st == nil {
			if bad == "" {
				t.Fatalf("parseState(%q) = nil without a reason", target)
			}
			return
		}
		again, bad := parseState(st.String())
		if again == nil || *again != *st {
			t.Fatalf("parseState(%q) = %+v, written %q, read back %+v (%s)", target, st, st.String(), again, bad)
		}
	})
}

// FuzzParseTarget checks that any entry target parses without panicking,
// and that the addresses of one that parses, written again, are read back
// the same.
func FuzzParseTarget(f *testing.F) {
	f.Add("10.1.2.2,2001:db8:1::2")
	f.Add("10.1.2.2")
	f.Add("*")
	f.Add("")
	f.Add("10.1.2.2,,10.1.2.3")
	f.Add("::ffff:10.1.2.2")
	f.Add("fe80::1%eth0")
	f.Fuzz(func(t *testing.T, target string) {
		ips, all, bad := parseTarget(target)
		switch {
		case bad != "":
			if ips != nil || all {
				t.Fatalf("parseTarget(%q) is corrupt (%s) and gave %v, %t", target, bad, ips, all)
			}
			return
		case all:
			if target != overflow {
				t.Fatalf("parseTarget(%q) = all", target)
			}
			return
		}
		if len(ips) != strings.Count(target, ",")+1 {
			t.Fatalf("parseTarget(%q) = %v", target, ips)
		}
		sorted := slices.SortedFunc(slices.Values(ips), netip.Addr.Compare)
		out := entryTarget(sorted)
		if out == overflow {
			return
		}
		back, all, bad := parseTarget(out)
		if bad != "" || all || !slices.Equal(back, sorted) {
			t.Fatalf("parseTarget(%q) = %v, written %q, read back %v, %t, %q", target, ips, out, back, all, bad)
		}
	})
}
