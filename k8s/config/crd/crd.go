// Package crd holds the CustomResourceDefinitions of package kubestore,
// IPClaim, IPOwner and IPCursor (ipam.ipamkit.io/v1alpha1), as the YAML
// files beside it: apply them to a cluster (kubectl apply -f
// k8s/config/crd/) before a kubestore.Store is used, or install them from a
// program with Manifests.
package crd

import "embed"

//go:embed *.yaml
var files embed.FS

// Manifests returns the YAML manifests of the CustomResourceDefinitions, one
// per file, in file name order.
func Manifests() [][]byte {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic(err) // embedded at build time
	}
	out := make([][]byte, 0, len(entries))
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}
