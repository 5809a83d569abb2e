package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostLocalStateDirectory hands the plugin a state directory as host-local
// leaves it, written here byte for byte: current and legacy (id-only) claim
// files, a zero-byte file from a host-local that crashed between create and
// write (containernetworking/plugins#498), and a last_reserved_ip.0 cursor.
func TestHostLocalStateDirectory(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	state := filepath.Join(dataDir, "legacy-net")
	writeState(t, state, map[string]string{
		"10.20.0.2":          "ctrA\r\neth0",
		"10.20.0.3":          "old", // before September 2018: the container ID only
		"10.20.0.5":          "",    // a crashed host-local's empty file
		"10.20.0.7":          "old2\r\neth0\n",
		"last_reserved_ip.0": "10.20.0.3",
		"lock":               "",
	})
	conf := netconf(t, `{"cniVersion": "0.4.0", "name": "legacy-net",
		"ipam": {"type": "host-local", "subnet": "10.20.0.0/28", "rangeEnd": "10.20.0.7"}}`, dataDir)
	add := func(id string) addResult {
		t.Helper()
		return parseAdd(t, call{Command: "ADD", ContainerID: id, IfName: "eth0", Config: conf}.mustExec(t))
	}

	// Round robin continues after the cursor (.3): .4, then .6 skipping the
	// empty file's .5, which stays taken as in host-local, then .7 is taken,
	// so the next wraps to .1 (the gateway, skipped) and finds nothing free.
	require.Equal(t, []string{"10.20.0.4/28 10.20.0.1"}, add("new1").addresses())
	require.Equal(t, []string{"10.20.0.6/28 10.20.0.1"}, add("new2").addresses())
	cerr := call{Command: "ADD", ContainerID: "new3", IfName: "eth0", Config: conf}.mustFail(t)
	require.Contains(t, cerr.Msg, "no IP addresses available in range set: 10.20.0.1-10.20.0.7")

	// The owner of a current claim gets it back.
	require.Equal(t, []string{"10.20.0.2/28 10.20.0.1"}, add("ctrA").addresses())
	// The legacy claim is found by CHECK and released by DEL, through
	// host-local's id-only fallback.
	call{Command: "CHECK", ContainerID: "old", IfName: "eth0", Config: conf}.mustExec(t)
	call{Command: "DEL", ContainerID: "old", IfName: "eth0", Config: conf}.mustExec(t)
	cerr = call{Command: "CHECK", ContainerID: "old", IfName: "eth0", Config: conf}.mustFail(t)
	require.Contains(t, cerr.Msg, "old")
	// A DEL with a prevResult in a 0.4.0 result, as a runtime sends it,
	// releases the listed address directly, a file with a trailing newline
	// included.
	withPrev := netconf(t, `{"cniVersion": "0.4.0", "name": "legacy-net",
		"ipam": {"type": "host-local", "subnet": "10.20.0.0/28", "rangeEnd": "10.20.0.7"},
		"prevResult": {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.20.0.7/28", "gateway": "10.20.0.1"}]}}`, dataDir)
	call{Command: "DEL", ContainerID: "old2", IfName: "eth0", Config: withPrev}.mustExec(t)
	// The freed .3 and .7 come next, after the cursor (.6).
	require.Equal(t, []string{"10.20.0.7/28 10.20.0.1"}, add("new4").addresses())
	require.Equal(t, []string{"10.20.0.3/28 10.20.0.1"}, add("new5").addresses())

	allocs, cursors := stateDir(t, state)
	require.Equal(t, map[string]string{
		"10.20.0.2": "ctrA\r\neth0",
		"10.20.0.3": "new5\r\neth0",
		"10.20.0.4": "new1\r\neth0",
		"10.20.0.5": "",
		"10.20.0.6": "new2\r\neth0",
		"10.20.0.7": "new4\r\neth0",
	}, allocs, "host-local's bytes: <id>\\r\\n<ifname>, no newline; the empty file left alone")
	require.Equal(t, map[string]string{"0": "10.20.0.3"}, cursors)
}

// TestDelWithPrevResultNotHeld checks that a DEL whose prevResult lists
// addresses the container does not hold releases nothing of anyone else's, and
// still releases what the container holds.
func TestDelWithPrevResultNotHeld(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	conf := netconf(t, `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.30.0.0/24"}]]}}`, dataDir)
	call{Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t) // .2
	call{Command: "ADD", ContainerID: "b", IfName: "eth0", Config: conf}.mustExec(t) // .3
	for _, prev := range []string{"10.30.0.3/24", "10.30.0.99/24", "192.0.2.1/24"} {
		del := netconf(t, fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.30.0.0/24"}]]},
			"prevResult": {"cniVersion": "1.0.0", "ips": [{"address": %q}]}}`, prev), dataDir)
		call{Command: "DEL", ContainerID: "a", IfName: "eth0", Config: del}.mustExec(t)
		allocs, _ := stateDir(t, filepath.Join(dataDir, "n"))
		require.Equalf(t, map[string]string{"10.30.0.3": "b\r\neth0"}, allocs, "DEL a with prevResult %s", prev)
		call{Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
	}
}
