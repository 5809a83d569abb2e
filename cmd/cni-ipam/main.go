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
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
)

func main() {
	p := &plugin{open: openState, stdout: os.Stdout, warn: os.Stderr, timeout: defaultTimeout}
	skel.PluginMainFuncs(p.funcs(), versionInfo{plugin: buildinfo.Version()}, about())
}
