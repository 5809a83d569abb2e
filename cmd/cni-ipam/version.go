package main

import (
	"encoding/json"
	"io"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
)

// about is what the plugin prints on standard error when it runs without
// CNI_COMMAND, in the form the CNI library recommends.
func about() string {
	return "CNI IPAM plugin cni-ipam (github.com/ipamkit/ipam) version " + buildinfo.Version()
}

// versionInfo is the answer to VERSION: the CNI protocol versions the plugin
// speaks (every version the CNI library knows), and the plugin's own version
// in the extra field pluginVersion, which runtimes ignore.
type versionInfo struct{ plugin string }

func (versionInfo) SupportedVersions() []string { return version.All.SupportedVersions() }

func (v versionInfo) Encode(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
		PluginVersion     string   `json:"pluginVersion"`
	}{version.Current(), v.SupportedVersions(), v.plugin})
}
