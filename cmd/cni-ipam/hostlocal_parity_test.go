package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"
)

// These tests run host-local v1.9.1's binary and the plugin's through the same
// steps, where the plugin once failed and host-local did not.

// bothPlugins returns the binaries to compare, by name.
func bothPlugins(t *testing.T) map[string]string {
	return map[string]string{"host-local": hostLocal(t), pluginType: filepath.Join(pluginDir, pluginType)}
}

// TestDelWithUnreadablePrevResult: a DEL whose prevResult does not parse (not
// an object, an address without a prefix length, garbage) succeeds and
// releases what the container holds, as host-local's does: a runtime that
// sends the same cached prevResult again must be able to tear down.
func TestDelWithUnreadablePrevResult(t *testing.T) {
	t.Parallel()
	for name, bin := range bothPlugins(t) {
		for i, prev := range []string{
			`42`,
			`"garbage"`,
			`{"cniVersion": "1.0.0", "ips": [{"address": "10.31.0.2"}]}`,
			`{"cniVersion": "1.0.0", "ips": [{"address": "not an address/24"}]}`,
			`{"cniVersion": "1.0.0", "ips": "10.31.0.2/24"}`,
			`{"cniVersion": "1.0.0", "ip4": {"ip": 7}}`,
		} {
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) {
				dataDir := t.TempDir()
				ranges := `"ranges": [[{"subnet": "10.31.0.0/24"}]]`
				conf := netconf(t, `{"cniVersion": "1.0.0", "name": "n", "ipam": {`+ranges+`}}`, dataDir)
				del := netconf(t, `{"cniVersion": "1.0.0", "name": "n", "ipam": {`+ranges+`}, "prevResult": `+prev+`}`, dataDir)
				call{Binary: bin, Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
				call{Binary: bin, Command: "ADD", ContainerID: "b", IfName: "eth0", Config: conf}.mustExec(t)
				call{Binary: bin, Command: "DEL", ContainerID: "a", IfName: "eth0", Config: del}.mustExec(t)
				call{Binary: bin, Command: "DEL", ContainerID: "a", IfName: "eth0", Config: del}.mustExec(t)
				allocs, _ := stateDir(t, filepath.Join(dataDir, "n"))
				require.Equalf(t, map[string]string{"10.31.0.3": "b\r\neth0"}, allocs, "prevResult %s", prev)
			})
		}
	}
}

// TestLongNetworkName: a network name of 252 to 255 characters (the longest a
// directory name can be) works as with host-local, and no message names a
// pool the user never wrote.
func TestLongNetworkName(t *testing.T) {
	t.Parallel()
	for n := 252; n <= 255; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			name := strings.Repeat("n", n)
			for plugin, bin := range bothPlugins(t) {
				dataDir := t.TempDir()
				conf := netconf(t, fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "ipam": {"ranges": [[{"subnet": "10.32.0.0/30"}]]}}`, name), dataDir)
				out := call{Binary: bin, Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
				require.Equalf(t, []string{"10.32.0.2/30 10.32.0.1"}, parseAdd(t, out).addresses(), "%s", plugin)
				allocs, _ := stateDir(t, filepath.Join(dataDir, name))
				require.Equalf(t, map[string]string{"10.32.0.2": "a\r\neth0"}, allocs, "%s", plugin)
				call{Binary: bin, Command: "CHECK", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)

				// The range set is full: host-local's message, no pool.
				cerr := call{Binary: bin, Command: "ADD", ContainerID: "b", IfName: "eth0", Config: conf}.mustFail(t)
				require.Containsf(t, cerr.Msg, "failed to allocate for range 0: no IP addresses available in range set: 10.32.0.1-10.32.0.2", "%s", plugin)
				noPool(t, cerr, name)
				call{Binary: bin, Command: "DEL", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
				allocs, _ = stateDir(t, filepath.Join(dataDir, name))
				require.Emptyf(t, allocs, "%s", plugin)
			}
			// A bad range set is named by its index.
			bad := netconf(t, fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "ipam": {"ranges": [[{"subnet": "10.32.0.0/31"}]]}}`, name), t.TempDir())
			cerr := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Config: bad}.mustFail(t)
			require.Equal(t, types.ErrInvalidNetworkConfig, cerr.Code)
			require.Contains(t, cerr.Msg, "invalid range set 0: ")
			noPool(t, cerr, name)
		})
	}
}

// noPool checks that a host-local-form error names no pool: neither the
// library's name for a range set (<network>/<index>) nor the plugin's.
func noPool(t *testing.T, cerr *types.Error, network string) {
	t.Helper()
	all := cerr.Msg + "\n" + cerr.Details
	for _, bad := range []string{`pool "`, network + "/", rangeSetPrefix} {
		require.NotContainsf(t, all, bad, "code %d: %s", cerr.Code, all)
	}
}

// TestStatusHasNoSideEffects: STATUS reports whether ADD could work and
// creates nothing: no state directory (under dataDir, or under host-local's
// default /var/lib/cni/networks when dataDir is not set), no lock file.
func TestStatusHasNoSideEffects(t *testing.T) {
	t.Parallel()
	status := func(t *testing.T, dataDir, name string) *types.Error {
		t.Helper()
		doc := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "ipam": {"ranges": [[{"subnet": "10.33.0.0/24"}]]}}`, name)
		_, cerr := call{Command: "STATUS", Config: netconf(t, doc, dataDir)}.exec(t)
		return cerr
	}
	t.Run("missing dataDir", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "not", "yet")
		require.Nil(t, status(t, dataDir, "n"))
		require.NoDirExists(t, filepath.Join(dataDir, "..")) // "not" was not created
	})
	t.Run("state directory without lock", func(t *testing.T) {
		dataDir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dataDir, "n"), 0o755))
		require.Nil(t, status(t, dataDir, "n"))
		entries, err := os.ReadDir(filepath.Join(dataDir, "n"))
		require.NoError(t, err)
		require.Empty(t, entries, "STATUS created files in the state directory")
	})
	t.Run("dataDir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		cerr := status(t, file, "n")
		require.NotNil(t, cerr)
		require.Equal(t, types.ErrPluginNotAvailable, cerr.Code, "%+v", cerr)
		require.Contains(t, cerr.Msg, file)
	})
	t.Run("state directory is a file", func(t *testing.T) {
		dataDir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dataDir, "n"), nil, 0o644))
		cerr := status(t, dataDir, "n")
		require.NotNil(t, cerr)
		require.Equal(t, types.ErrPluginNotAvailable, cerr.Code, "%+v", cerr)
		require.Contains(t, cerr.Msg, "not a directory")
	})
	t.Run("default dataDir", func(t *testing.T) {
		// A name no other test or host uses: whether STATUS is ready depends
		// on this machine's /var/lib, but it must create nothing there.
		name := fmt.Sprintf("cni-ipam-status-test-%d", os.Getpid())
		dir := filepath.Join("/var/lib/cni/networks", name)
		_, err := os.Stat(dir)
		require.Truef(t, errors.Is(err, fs.ErrNotExist), "%s exists before the test: %v", dir, err)
		// Whatever a failing STATUS creates is removed again.
		created := []string{dir}
		for _, p := range []string{"/var/lib/cni/networks", "/var/lib/cni"} {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				created = append(created, p)
				defer func() { require.NoDirExists(t, p, "STATUS created it") }()
			}
		}
		t.Cleanup(func() {
			for _, p := range created {
				if p == dir {
					os.RemoveAll(p)
				} else {
					os.Remove(p) // only if empty: nothing of anyone else's
				}
			}
		})
		if cerr := status(t, "", name); cerr != nil {
			require.Equal(t, types.ErrPluginNotAvailable, cerr.Code, "%+v", cerr)
		}
		require.NoDirExists(t, dir, "STATUS created the state directory")
	})
}
