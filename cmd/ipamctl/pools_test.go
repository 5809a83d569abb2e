package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPoolsGolden runs ipamctl pools on manifests and on a node's state
// directory and compares the transcripts with their golden files
// (regenerate with go test ./cmd/ipamctl -run TestPoolsGolden -update).
// The live source's golden test is in k8s/kubetest (TestIpamctlPoolsLive),
// against an in-process API server.
func TestPoolsGolden(t *testing.T) {
	// The state directory is copied: filestore takes its lock and marks
	// it, and the testdata must not change. Its path is $STATE in the
	// transcript.
	state := t.TempDir()
	copyDir(t, "testdata/node/state", state)
	tests := []struct {
		golden string
		args   []string
	}{
		// Manifests: reservations (default-v4 and east-v4), a pool with
		// one address (tiny-v4, full), claims in status.allocatedIPs.
		{"pools.golden", []string{"pools", "-f", "testdata/cluster.yaml"}},
		{"pools-gc.json.golden", []string{"pools", "-f", "testdata/gc.yaml", "-o", "json"}},
		// A node's state: host-local's range sets from a config list,
		// claim files, one of them corrupt (it holds its address), and
		// an IPv6 /64 of 2^64-2 addresses (every one but the subnet's
		// first and its gateway).
		{"pools-state.golden", []string{"pools", "--cni-config", "testdata/node/mynet.conflist", "--state-dir", filepath.Join(state, "mynet")}},
		{"pools-state.json.golden", []string{"pools", "--cni-config", "testdata/node/mynet.conflist", "--state-dir", filepath.Join(state, "mynet"), "-o", "json"}},
		// Bad input: problems named, the rest counted.
		{"pools-bad.golden", []string{"pools", "-f", "testdata/bad.yaml"}},
		{"pools-state-missing.golden", []string{"pools", "--cni-config", "testdata/node/mynet.conflist", "--state-dir", filepath.Join(state, "nonet")}},
		{"pools-usage.golden", []string{"pools", "--state-dir", state}},
		{"pools-usage-both.golden", []string{"pools", "--cni-config", "testdata/node/mynet.conflist", "-f", "testdata/cluster.yaml"}},
		// who: a claim of status.allocatedIPs, an address no one holds,
		// a claim file of a node (and a corrupt one, which has no owner
		// to show: it is reported as a problem), bad input.
		{"who.golden", []string{"who", "10.80.0.19", "-f", "testdata/gc.yaml"}},
		{"who-free.json.golden", []string{"who", "-f", "testdata/gc.yaml", "-o", "json", "10.80.0.99"}},
		{"who-state.golden", []string{"who", "2001:db8:1::2", "--cni-config", "testdata/node/mynet.conflist", "--state-dir", filepath.Join(state, "mynet")}},
		{"who-state-corrupt.golden", []string{"who", "10.1.2.12", "--cni-config", "testdata/node/mynet.conflist", "--state-dir", filepath.Join(state, "mynet")}},
		{"who-bad.golden", []string{"who", "10.80.0.300", "-f", "testdata/gc.yaml"}},
		{"who-none.golden", []string{"who", "-f", "testdata/gc.yaml"}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.golden, ".golden"), func(t *testing.T) {
			stdout, stderr, code := runCmd(t, tt.args...)
			got := strings.ReplaceAll(transcript(tt.args, stdout, stderr, code), state, "$STATE")
			checkGolden(t, tt.golden, got)
		})
	}
	// No claim file was written or removed.
	for _, dir := range []string{"testdata/node/state/mynet", filepath.Join(state, "mynet")} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, stateName(e.Name()))
		}
		if got := strings.Join(names, " "); got != "10.1.2.10 10.1.2.11 10.1.2.12 10.1.2.13 2001:db8:1::2 last_reserved_ip.0 last_reserved_ip.1 lock" {
			t.Errorf("%s holds %s after pools", dir, got)
		}
	}
}

// stateName is the name of a state directory's file whose name in testdata
// is escaped: a module's zip may not hold a file name with a colon, as an
// IPv6 claim file's is, so testdata spells ':' as %3A.
func stateName(name string) string {
	return strings.ReplaceAll(name, "%3A", ":")
}

// copyDir copies the regular files of the tree src into dst, with their
// names unescaped (stateName).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, stateName(rel)), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
