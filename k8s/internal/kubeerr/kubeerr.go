// Package kubeerr holds the error the k8s module's packages return when the
// API server gives no usable answer, so that they all return the same one
// (kubestore.ErrUnavailable, kubeclient.ErrUnavailable).
package kubeerr

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrUnavailable: the API server cannot be reached, answered that it is
// overloaded or failing (429, 5xx) or that it does not serve the resource
// (yet: a CustomResourceDefinition is served a moment after the server
// starts, and not at all if it is not installed), or the call's context
// ended first.
var ErrUnavailable = errors.New("kubernetes API server unavailable")

// Unavailable reports whether err, the error of a request made with ctx,
// means the server gave no usable answer.
func Unavailable(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true // no answer: refused, reset, timed out
	}
	switch code := st.Status().Code; {
	case code == http.StatusTooManyRequests, code >= 500:
		return true
	case code == http.StatusNotFound:
		return notServed(st.Status())
	}
	return false
}

// notServed reports whether a 404 is the server's answer for a resource
// it has no handler for: a page without a Status, which client-go turns
// into a generic error.
func notServed(st metav1.Status) bool {
	if st.Details == nil {
		return true
	}
	for _, c := range st.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

// ObjectNotFound reports whether err says that the object name does not
// exist: a 404 with the server's Status naming it, not one for a resource
// the server does not serve (see Unavailable).
func ObjectNotFound(err error, name string) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Reason != metav1.StatusReasonNotFound || notServed(st.Status()) {
		return false
	}
	return st.Status().Details.Name == name
}

// Wrap returns err, the error of a request made with ctx, wrapping
// ErrUnavailable (and ctx's error) if it means the server gave no usable
// answer; otherwise err as it is.
func Wrap(ctx context.Context, err error) error {
	if !Unavailable(ctx, err) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w (%w)", ErrUnavailable, cerr, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
