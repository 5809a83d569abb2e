package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// openState opens the state directory of a network in host-local's format,
// mapping each pool to its range-set index and prefixes.
//
// Without sync the files are written as host-local writes them, without
// fsync: a process that dies at any moment leaves no partial claim file
// (see store/filestore), and what a power loss may lose is the claims of
// containers that do not outlive it either (after a reboot the runtime adds
// its pods again, and garbage collection releases what they held). With
// sync, every write is fsynced before the call returns.
func openState(dir string, pools []poolLoc, sync bool) (store.Store, io.Closer, error) {
	fs, err := filestore.Open(dir, filestore.Options{Pools: pools, Sync: sync})
	if err != nil {
		return nil, nil, err
	}
	return withCapabilities(&stateStore{base: fs, warn: os.Stderr}), fs, nil
}

// withCapabilities returns s with the optional capabilities of its file
// store that the plugin passes on: CreateExclusive, when the file store can
// check what a container holds as it creates.
func withCapabilities(s *stateStore) store.Store {
	if _, ok := s.base.(store.ExclusiveCreator); ok {
		return exclusiveStateStore{s}
	}
	return s
}

// exclusiveStateStore is a stateStore over a file store with CreateExclusive.
type exclusiveStateStore struct{ *stateStore }

var _ store.ExclusiveCreator = exclusiveStateStore{}

// CreateExclusive is the file store's, for host-local's owner.
func (s exclusiveStateStore) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.base.(store.ExclusiveCreator).CreateExclusive(ctx, hostLocalOwner(c))
}

// cursorStore is a Store with host-local's last_reserved_ip cursors.
type cursorStore interface {
	store.Store
	store.Cursors
}

// stateStore adapts the file store to what the plugin asks of it:
//
//   - an owner is its container ID and interface (host-local's identity),
//     and the pod's namespace and name, which the Spiderpool form passes to
//     the selection filters, are not written (the format has no room for
//     them, and they are not the owner's identity);
//   - a file that is not a claim (a zero-byte file left by a crashed
//     host-local, containernetworking/plugins#498) keeps its address taken, as
//     in host-local, instead of failing every allocation in its pool: List
//     returns the claims it could read, and Create of that address fails with
//     ErrExists.
type stateStore struct {
	base cursorStore
	warn io.Writer
}

// stateStore writes a claim and the cursor in one call (see
// CreateAndSetCursor).
var _ store.CursorCreator = (*stateStore)(nil)

func hostLocalOwner(c store.Claim) store.Claim {
	if c.Owner.UID == "" && !c.Owner.Stable {
		c.Owner.Namespace, c.Owner.Name = "", ""
	}
	return c
}

func (s *stateStore) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	return s.base.Get(ctx, pool, ip)
}

func (s *stateStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	cs, err := s.base.List(ctx, pool)
	if err != nil && errors.Is(err, filestore.ErrCorrupt) {
		fmt.Fprintf(s.warn, "cni-ipam: pool %q: addresses kept taken: %v\n", pool, err)
		return cs, nil
	}
	return cs, err
}

func (s *stateStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.base.Create(ctx, hostLocalOwner(c))
}

func (s *stateStore) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	return s.base.Update(ctx, hostLocalOwner(c), rev)
}

func (s *stateStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	return s.base.Delete(ctx, pool, ip, rev)
}

func (s *stateStore) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	cs, err := s.base.Owned(ctx, q)
	if err != nil && errors.Is(err, filestore.ErrCorrupt) {
		fmt.Fprintf(s.warn, "cni-ipam: owner %s: addresses kept taken: %v\n", q, err)
		return cs, nil
	}
	return cs, err
}

func (s *stateStore) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	return s.base.Cursor(ctx, pool)
}

func (s *stateStore) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	return s.base.SetCursor(ctx, pool, ip)
}

// CreateAndSetCursor writes the claim and last_reserved_ip under one lock of
// the state directory when the file store can, else one after the other.
func (s *stateStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return store.CreateAndSetCursor(ctx, s.base, hostLocalOwner(c), func(err error) {
		fmt.Fprintf(s.warn, "cni-ipam: pool %q: cannot record last reserved address %s: %v\n", c.Pool, c.IP, err)
	})
}
