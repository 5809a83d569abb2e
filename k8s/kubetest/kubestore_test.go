package kubetest_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/storetest"
)

var (
	claimsGVR  = schema.GroupVersionResource{Group: kubestore.Group, Version: kubestore.Version, Resource: kubestore.ClaimResource}
	cursorsGVR = schema.GroupVersionResource{Group: kubestore.Group, Version: kubestore.Version, Resource: kubestore.CursorResource}
)

// emptyBackend deletes every IPClaim and IPCursor, so that the next test
// starts on an empty store.
func emptyBackend(t testing.TB) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	for _, gvr := range []schema.GroupVersionResource{claimsGVR, cursorsGVR} {
		if err := dyn.Resource(gvr).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("deleting every %s: %v", gvr.Resource, err)
		}
	}
}

// newStore opens a Store with a client of its own on the test server.
func newStore(t testing.TB) *kubestore.Store {
	t.Helper()
	s, err := kubestore.New(srv.Config(), kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		emptyBackend(t)
		return func() store.Store { return newStore(t) }
	})
}
