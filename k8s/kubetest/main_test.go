package kubetest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ipamkit/ipam/k8s/config/crd"
	"github.com/ipamkit/ipam/k8s/kubetest"
)

// srv is the one API server of this test package, shared by every test:
// starting one takes about half a second, stopping one a second, and the
// first creates after its CRDs are installed wait two more.
var srv *kubetest.Server

func TestMain(m *testing.M) {
	if os.Getenv(gcscaleChildEV) != "" {
		os.Exit(gcscaleChild()) // BenchmarkGCScale's passes, in a process of their own
	}
	if os.Getenv(childEnv) != "" {
		// This binary run again by a test, as a process of its own.
		os.Exit(childMain())
	}
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
