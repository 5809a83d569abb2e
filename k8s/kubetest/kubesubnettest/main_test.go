// Package kubesubnettest tests package kubesubnet (the SpiderSubnet runner
// and the allocators' auto-pool source) against the real API server of
// package kubetest.
package kubesubnettest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ipamkit/ipam/k8s/config/crd"
	"github.com/ipamkit/ipam/k8s/kubetest"
)

// srv is the one API server of this test package, shared by every test and
// benchmark; each uses its own subnets, namespaces and applications.
var srv *kubetest.Server

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := kubetest.Start(kubetest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.InstallCRDs(ctx, append(crd.Manifests(), kubetest.SpiderpoolCRDs()...)...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv = s
	return m.Run()
}
