//go:build !kubernetes

package main

import (
	"fmt"
	"io"
)

// runAgent is "cni-ipam agent" in a plugin built without the Kubernetes
// client: it says so. The plugin forwards calls to an agent in every build
// (agentclient.go); only the agent needs the client.
func runAgent(_ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "cni-ipam agent: this cni-ipam is built without Kubernetes support; build it with -tags kubernetes")
	return 2
}
