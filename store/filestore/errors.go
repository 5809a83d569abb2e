package filestore

import (
	"errors"
	"net/netip"

	"github.com/ipamkit/ipam/store"
)

// Errors of this package, besides the store sentinels. Callers branch on them
// with errors.Is.
var (
	// ErrCorrupt is wrapped by every *CorruptError: a file named as a claimed
	// address whose content is not a claim. Get returns it for that address; List
	// returns it, joined, with the claims it could read. It is store.ErrCorrupt,
	// so callers of the Store contract (the Allocator) recognise it.
	ErrCorrupt = store.ErrCorrupt
	// ErrUnsupportedOwner is returned, wrapped, by Create and Update when the
	// claim's owner cannot be written in host-local's format: it has no
	// container ID, or it carries a UID, namespace, name or the Stable flag,
	// which the format has no room for.
	ErrUnsupportedOwner = errors.New("owner not representable in host-local's format")
)

// CorruptError reports a file named as an address of a pool whose content is
// not a claim. It unwraps to ErrCorrupt.
//
// The zero CorruptError reports nothing useful. A *CorruptError is not modified
// after it is returned and is safe to share.
type CorruptError struct {
	// Path is the file.
	Path string
	// IP is the address the file is named after.
	IP netip.Addr
	// Revision is the file's revision, with which Delete removes it or Update
	// replaces it; zero if the file could not be examined (Delete and Update
	// then fail with store.ErrConflict).
	Revision int64
	// Reason says what is wrong with it, such as "empty file".
	Reason string
}

func (e *CorruptError) Error() string {
	return e.Path + ": corrupt claim file: " + e.Reason
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
