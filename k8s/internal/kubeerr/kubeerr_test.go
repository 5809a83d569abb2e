package kubeerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "ipam.ipamkit.io", Resource: "ipclaims"}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name        string
		ctx         context.Context
		err         error
		unavailable bool
		objectGone  bool // ObjectNotFound(err, "x")
	}{
		{name: "object not found", err: apierrors.NewNotFound(gr, "x"), objectGone: true},
		{name: "another object not found", err: apierrors.NewNotFound(gr, "y")},
		// What client-go makes of a 404 page without a Status: the server
		// does not serve the resource (a CRD not installed, or not served
		// yet after a restart), even when the request named an object.
		{name: "resource not served", err: apierrors.NewGenericServerResponse(404, "get", gr, "x", "404 page not found", 0, true), unavailable: true},
		{name: "conflict", err: apierrors.NewConflict(gr, "x", errors.New("changed"))},
		{name: "too many requests", err: apierrors.NewTooManyRequests("slow down", 1), unavailable: true},
		{name: "internal error", err: apierrors.NewInternalError(errors.New("etcd")), unavailable: true},
		{name: "no answer", err: errors.New("connection refused"), unavailable: true},
		{name: "context ended", ctx: canceled, err: fmt.Errorf("get: %w", context.Canceled), unavailable: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			if got := Unavailable(ctx, tt.err); got != tt.unavailable {
				t.Errorf("Unavailable = %v, want %v", got, tt.unavailable)
			}
			if got := errors.Is(Wrap(ctx, tt.err), ErrUnavailable); got != tt.unavailable {
				t.Errorf("Wrap wraps ErrUnavailable: %v, want %v", got, tt.unavailable)
			}
			if got := ObjectNotFound(tt.err, "x"); got != tt.objectGone {
				t.Errorf("ObjectNotFound = %v, want %v", got, tt.objectGone)
			}
		})
	}
}
