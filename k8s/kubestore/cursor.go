package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam/store"
)

// cursorObject is an IPCursor: where SetCursor last put a pool's cursor.
type cursorObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cursorSpec `json:"spec"`
}

type cursorSpec struct {
	Pool string `json:"pool"`
	IP   string `json:"ip"`
}

// fieldManager names the Store in the objects' managedFields.
const fieldManager = "ipamkit-kubestore"

// cursorName is the name of pool's IPCursor: the pool's name, or its hash as
// in ClaimName.
func cursorName(pool string) string {
	if isDNSSubdomain(pool) {
		return pool
	}
	return hash(pool)
}

// CreateAndSetCursor creates c as Create does, marked with LabelCursor:
// that mark is the cursor, so moving it costs no request of its own, and no
// object is written by every allocation in a pool. See Cursor.
func (s *Store) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, true)
}

// SetCursor records ip as pool's cursor in the pool's IPCursor object (a
// server-side apply, which creates it if needed). Allocators that find
// CreateAndSetCursor do not call it for each claim.
func (s *Store) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: set cursor of %s: %w", pool, err)
	}
	if !ip.IsValid() {
		return fmt.Errorf("kubestore: set cursor of %s: %w", pool, errNoName)
	}
	name := cursorName(pool)
	body, err := json.Marshal(&cursorObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAPIVersion, Kind: cursorKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       cursorSpec{Pool: pool, IP: ip.String()},
	})
	if err != nil {
		return fmt.Errorf("kubestore: set cursor of %s: %w", pool, err)
	}
	req := s.client.Patch(types.ApplyPatchType).Resource(CursorResource).Name(name).
		Param("fieldManager", fieldManager).Param("force", "true").Body(body)
	if _, err := s.do(ctx, req); err != nil {
		return s.fail(ctx, "set cursor of", pool, "", err)
	}
	return nil
}

// Cursor returns pool's cursor: the address of whichever was written last,
// the pool's IPCursor (SetCursor) or the newest claim of the pool that
// CreateAndSetCursor made and nobody has updated since (an Update drops
// the mark, so that re-pointing an old claim does not move the cursor
// back). A deleted claim no longer counts: after its address is released,
// the cursor falls back to the claim marked before it.
//
// Both are read consistently: Cursor reflects every completed write. It
// costs a Get and a list of the pool's marked claims, which, like List, grows
// with the pool; an Allocator asks for it when it first loads a pool.
func (s *Store) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return netip.Addr{}, fmt.Errorf("kubestore: cursor of %s: %w", pool, err)
	}
	var best netip.Addr
	var bestRev int64
	name := cursorName(pool)
	raw, err := s.do(ctx, s.client.Get().Resource(CursorResource).Name(name))
	switch {
	case err == nil:
		o := &cursorObject{}
		if err := json.Unmarshal(raw, o); err != nil {
			return netip.Addr{}, &CorruptError{Name: name, Field: "(object)", Value: truncate(string(raw)), Reason: err.Error()}
		}
		rev, ok := parseRevision(o.ResourceVersion)
		ip, err := netip.ParseAddr(o.Spec.IP)
		switch {
		case !ok:
			return netip.Addr{}, &CorruptError{Name: name, Field: "metadata.resourceVersion", Value: o.ResourceVersion, Reason: "not a positive decimal integer"}
		case err != nil:
			return netip.Addr{}, &CorruptError{Name: name, Field: "spec.ip", Value: o.Spec.IP, Reason: "not an IP address"}
		case o.Spec.Pool == pool:
			best, bestRev = ip, rev
		}
	case !isObjectNotFound(err, name):
		return netip.Addr{}, s.fail(ctx, "cursor of", pool, "", err)
	}
	marked, err := s.listClaims(ctx, LabelPool+"="+labelValue(pool)+","+LabelCursor+"=true",
		func(c store.Claim) bool { return c.Pool == pool })
	switch {
	case errors.Is(err, store.ErrCorrupt):
		// Unreadable marked claims lose a hint, nothing else.
		s.log.Warn("kubestore: claims skipped while reading a cursor", "pool", pool, "err", err)
	case err != nil:
		return netip.Addr{}, s.fail(ctx, "cursor of", pool, "", err)
	}
	for _, c := range marked {
		if c.Revision > bestRev {
			best, bestRev = c.IP, c.Revision
		}
	}
	return best, nil
}
