package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"
)

// pluginType is the name the tests install the plugin under: the "type" of
// the network configs they pass.
const pluginType = "cni-ipam"

// pluginDir is a CNI_PATH directory holding the plugin binary, built once.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "cni-ipam-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// Built as the README says to build it: static, without cgo.
		build := exec.Command("go", "build", "-o", filepath.Join(dir, pluginType), ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the plugin:", err)
			return 1
		}
		pluginDir = dir
		return m.Run()
	}())
}

// hostLocalVersion is the host-local the tests run side by side with the
// plugin: the version the recorded vectors come from.
const hostLocalVersion = "v1.9.1"

var (
	hostLocalOnce sync.Once
	hostLocalPath string
	hostLocalErr  error
)

// hostLocal returns the path of host-local's binary, built from its module
// (github.com/containernetworking/plugins at hostLocalVersion, through the
// module proxy) into the test's CNI_PATH directory on first use.
func hostLocal(t testing.TB) string {
	t.Helper()
	hostLocalOnce.Do(func() {
		install := exec.Command("go", "install", "github.com/containernetworking/plugins/plugins/ipam/host-local@"+hostLocalVersion)
		// Outside any module and workspace: the version is the one named;
		// static, as the plugin is built and as CNI plugins ship.
		install.Env = append(os.Environ(), "GOBIN="+pluginDir, "GOWORK=off", "CGO_ENABLED=0")
		install.Dir = pluginDir
		if out, err := install.CombinedOutput(); err != nil {
			hostLocalErr = fmt.Errorf("building host-local %s: %v\n%s", hostLocalVersion, err, out)
			return
		}
		hostLocalPath = filepath.Join(pluginDir, "host-local")
	})
	require.NoError(t, hostLocalErr)
	return hostLocalPath
}

// call is one invocation of the plugin binary over the CNI protocol.
type call struct {
	// Binary is the plugin to run; empty means cni-ipam.
	Binary      string
	Command     string // ADD, DEL, CHECK, GC, STATUS, VERSION
	ContainerID string
	IfName      string
	Args        string // CNI_ARGS
	Config      []byte // stdin
}

// exec runs the plugin binary for c. It returns stdout on success, or the
// CNI error it printed (exit status 1, error JSON on stdout).
func (c call) exec(t testing.TB) ([]byte, *types.Error) {
	t.Helper()
	out, cerr, err := c.run()
	require.NoError(t, err)
	return out, cerr
}

// run is exec without a test: safe in any goroutine.
func (c call) run() ([]byte, *types.Error, error) {
	bin := c.Binary
	if bin == "" {
		bin = filepath.Join(pluginDir, pluginType)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+c.Command,
		"CNI_CONTAINERID="+c.ContainerID,
		"CNI_NETNS=/var/run/netns/cni-ipam-test", // IPAM plugins never enter it
		"CNI_IFNAME="+c.IfName,
		"CNI_ARGS="+c.Args,
		"CNI_PATH="+pluginDir,
	)
	cmd.Stdin = bytes.NewReader(c.Config)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return nil, nil, fmt.Errorf("running the plugin: %w (stderr %q)", err, stderr.String())
	}
	var ce types.Error
	if err := json.Unmarshal(stdout.Bytes(), &ce); err != nil || ce.Code == 0 {
		return nil, nil, fmt.Errorf("exit status %d: stdout is not a CNI error: %q (stderr %q)", ee.ExitCode(), stdout.String(), stderr.String())
	}
	return nil, &ce, nil
}

// mustExec runs c and fails the test on a CNI error.
func (c call) mustExec(t testing.TB) []byte {
	t.Helper()
	out, cerr := c.exec(t)
	require.Nilf(t, cerr, "%s %s/%s: %v", c.Command, c.ContainerID, c.IfName, cerr)
	return out
}

// mustFail runs c and returns its CNI error, failing the test on success.
func (c call) mustFail(t testing.TB) *types.Error {
	t.Helper()
	out, cerr := c.exec(t)
	require.NotNilf(t, cerr, "%s %s/%s: want an error, got %s", c.Command, c.ContainerID, c.IfName, out)
	return cerr
}

// netconf returns a network config: the JSON object doc with ipam.dataDir
// set to dataDir (if not empty) and "type" to the plugin's.
func netconf(t testing.TB, doc string, dataDir string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(doc), &m))
	if _, ok := m["type"]; !ok {
		m["type"] = pluginType
	}
	if ipamSec, ok := m["ipam"].(map[string]any); ok && dataDir != "" {
		ipamSec["dataDir"] = dataDir
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// stateDir reads a network state directory: the address files (name ->
// exact bytes) and the last_reserved_ip.N files (N -> content). Any other
// file than lock is a test failure.
func stateDir(t testing.TB, dir string) (allocs, cursors map[string]string) {
	t.Helper()
	allocs, cursors = map[string]string{}, map[string]string{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return allocs, cursors
	}
	require.NoError(t, err)
	var odd []string
	for _, e := range entries {
		name := e.Name()
		if name == "lock" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		switch {
		case strings.HasPrefix(name, "last_reserved_ip."):
			cursors[strings.TrimPrefix(name, "last_reserved_ip.")] = string(data)
		case isAddr(name):
			allocs[name] = string(data)
		default:
			odd = append(odd, name)
		}
	}
	sort.Strings(odd)
	require.Emptyf(t, odd, "unexpected files in the state directory %s", dir)
	return allocs, cursors
}

// writeState writes files into a network state directory as host-local would.
func writeState(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
}

// addResult is the part of a 0.3.0+ result the tests compare.
type addResult struct {
	CNIVersion string `json:"cniVersion"`
	IPs        []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway,omitempty"`
		Version string `json:"version,omitempty"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw,omitempty"`
	} `json:"routes"`
	DNS types.DNS `json:"dns"`
}

func parseAdd(t testing.TB, out []byte) addResult {
	t.Helper()
	var r addResult
	require.NoErrorf(t, json.Unmarshal(out, &r), "result %s", out)
	return r
}

// addresses returns "address gateway" of every ip of r.
func (r addResult) addresses() []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, strings.TrimSpace(ip.Address+" "+ip.Gateway))
	}
	return out
}

// isAddr reports whether name is an address in the form host-local writes.
func isAddr(name string) bool {
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.String() == name
}
