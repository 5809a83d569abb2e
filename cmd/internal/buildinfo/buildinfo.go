// Package buildinfo says which version of the programs is running, from the
// build information the Go toolchain writes into every binary.
package buildinfo

import "runtime/debug"

// Version returns the version of module github.com/ipamkit/ipam/cmd this
// binary was built from: a tag such as v0.4.0 when installed with
// `go install ...@v0.4.0`, a pseudo-version when built in a clone with
// version control information, and "(devel)" otherwise (a build in a
// go.work workspace, or a binary without build information).
func Version() string {
	return version(debug.ReadBuildInfo())
}

func version(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}
