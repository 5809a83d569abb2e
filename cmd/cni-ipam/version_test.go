package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
)

// TestPluginVersion checks that the binary says its version: in VERSION's
// pluginVersion and in the text it prints without CNI_COMMAND.
func TestPluginVersion(t *testing.T) {
	t.Parallel()
	out := call{Command: "VERSION"}.mustExec(t)
	var info struct {
		PluginVersion string `json:"pluginVersion"`
	}
	require.NoError(t, json.Unmarshal(out, &info))
	// The test binary and the plugin are built from the same workspace.
	require.Equal(t, buildinfo.Version(), info.PluginVersion)

	cmd := exec.Command(filepath.Join(pluginDir, pluginType))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run())
	require.Contains(t, stderr.String(), "cni-ipam (github.com/ipamkit/ipam) version "+info.PluginVersion+"\n")
}
