// Command cni-ipam is a CNI IPAM plugin built on the ipam library: a drop-in
// for host-local that keeps host-local's state directory byte for byte, and
// that also serves Spiderpool-style named pools from the network config.
//
// It speaks CNI 0.1.0 to 1.1.0: ADD, DEL, CHECK, VERSION, GC and STATUS. The
// configuration is host-local's (ipam.ranges, the legacy top-level range,
// routes, dataDir, resolvConf, CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips
// and ipRanges), or, when ipam names pools instead of ranges, SpiderIPPool
// specs with default_ipv4_ippool, default_ipv6_ippool and clean_gateway. The
// state lives in <dataDir>/<network name> in host-local's format.
//
// Where it differs from host-local (see README.md): a repeated ADD for the same
// container and interface returns what it holds; a failed ADD keeps what the
// container held; requested addresses are checked before anything is
// allocated; every invocation has a 100 s deadline, and a lost race or the
// deadline is error 11, try again later.
//
// VERSION also says the plugin's own version (pluginVersion), and so does the
// text printed when the plugin runs without CNI_COMMAND.
//
// Run as "cni-ipam agent --node NAME", the binary built with -tags
// kubernetes is the node agent (agent.go): a long-lived process that serves
// the calls of the plugins whose network config names its socket
// (ipam.kubernetes.agent), which forward them to it (agentclient.go).
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
	"github.com/ipamkit/ipam/cmd/internal/limited"
)

// maxStdin is the limit of the network config on stdin: skel reads it
// whole, and a runtime (or a hand) that sends an endless stream would run
// the plugin out of memory. Real configs are kilobytes; inline pools can
// make them megabytes.
const maxStdin = 16 << 20

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		// The node agent (agent.go). A runtime runs the plugin without
		// arguments, so no CNI call comes here.
		os.Exit(runAgent(os.Args[2:], os.Stdout, os.Stderr))
	}
	if os.Getenv("CNI_COMMAND") != "" {
		// Without a command skel reads no stdin, which may be a terminal.
		if err := limitStdin(maxStdin); err != nil {
			if err := err.Print(); err != nil {
				os.Exit(2)
			}
			os.Exit(1)
		}
	}
	p := &plugin{open: openState, stdout: os.Stdout, warn: os.Stderr, timeout: defaultTimeout}
	skel.PluginMainFuncs(p.funcs(), versionInfo{plugin: buildinfo.Version()}, about())
}

// limitStdin reads stdin up to max bytes and gives skel what it read, or
// returns the CNI error of a config over the limit.
func limitStdin(max int64) *types.Error {
	data, err := limited.Read(os.Stdin, max)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network config on stdin: %v", err), "")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("network config on stdin: %v", err), "")
	}
	go func() {
		w.Write(data) // skel reads it all, or the process exits
		w.Close()
	}()
	os.Stdin = r
	return nil
}

// maxContainerID is the longest CNI_CONTAINERID the plugin takes. Runtimes
// send 64 hexadecimal digits; the stores have limits of their own, which
// would be reported as internal errors (code 999).
const maxContainerID = 1024

// checkContainerID refuses a container ID over maxContainerID bytes.
func checkContainerID(id string) error {
	if len(id) > maxContainerID {
		return &codedError{types.ErrInvalidEnvironmentVariables,
			fmt.Errorf("CNI_CONTAINERID: %d bytes, more than %d (%q...)", len(id), maxContainerID, id[:16])}
	}
	return nil
}
