package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipamkit/ipam/store"
)

// Errors of this package, besides the store sentinels. Callers branch on them
// with errors.Is.
var (
	// ErrUnavailable is wrapped by the error of every call that could not
	// reach a quorum of the cluster before its deadline: no member answered,
	// the members have no leader, the connection was refused or broke, or
	// the call's context or Options.Timeout expired on the way. The error
	// also wraps the cause, such as context.DeadlineExceeded. Such a call
	// may or may not have been applied: a write whose answer was lost on
	// the way back is in the store all the same. A caller tries again later
	// (a CNI plugin returns code 11, "try again later"); an owner that asks
	// again finds what an earlier, unanswered call claimed for it.
	ErrUnavailable = errors.New("etcd unavailable")
	// ErrCorrupt is wrapped by every *CorruptError. It is store.ErrCorrupt,
	// so that callers of the Store contract (the Allocator) recognise it.
	ErrCorrupt = store.ErrCorrupt
)

// CorruptError reports a key under the Store's prefix that it cannot read: a
// value that is not a claim, a claim whose pool or address differs from its
// key's, or a key outside the layout. The address of such a claim key stays
// taken (Create of it fails with store.ErrExists). It unwraps to ErrCorrupt.
//
// The zero CorruptError reports nothing useful. A *CorruptError is not
// modified after it is returned and is safe to share.
type CorruptError struct {
	// Key is the etcd key.
	Key string
	// Revision is the key's ModRevision, with which Delete removes it.
	Revision int64
	// Reason says what is wrong with it.
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("key %q: unreadable claim record: %s", e.Key, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// callError turns the error of a call to etcd into what a Store method
// returns: one wrapping ErrUnavailable and the cause when the cluster could
// not be reached or did not answer in time (see ErrUnavailable), the cause
// as it is otherwise. detail is the error gRPC reported before the etcd
// client rewrote it (see detailKey), or nil: when it says more than err, as
// when a TLS handshake failed, it is added to the message, and so is note
// (see certNote) if err is of an unreachable cluster.
func callError(err, detail error, note string) error {
	var details []string
	if detail != nil && detail.Error() != err.Error() {
		details = append(details, detail.Error())
	}
	if !unavailable(err) {
		if len(details) > 0 {
			err = &detailedError{err: err, detail: details[0]}
		}
		return err
	}
	if note != "" {
		details = append(details, note)
	}
	if len(details) > 0 {
		err = &detailedError{err: err, detail: strings.Join(details, "; ")}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// unavailable reports whether err says that the
// cluster could not answer: a deadline (the caller's or Options.Timeout), or
// a gRPC or etcd error of code Unavailable (no leader, server stopped,
// request timed out, no connection). A cancellation by the caller is not.
func unavailable(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, context.Canceled):
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded ||
			errors.Is(ee, rpctypes.ErrTooManyRequests)
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// detailedError is an error of the etcd client with the more telling error
// that gRPC gave for the same failure.
type detailedError struct {
	err    error
	detail string
}

func (e *detailedError) Error() string { return e.err.Error() + " (" + e.detail + ")" }
func (e *detailedError) Unwrap() error { return e.err }
