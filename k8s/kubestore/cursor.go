package kubestore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam/store"
)

// cursorObject is an IPCursor: where SetCursor last put a pool's cursor
// (on one node, with Options.Node).
type cursorObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cursorSpec `json:"spec"`
}

type cursorSpec struct {
	Pool string `json:"pool"`
	Node string `json:"node,omitempty"`
	IP   string `json:"ip"`
}

// fieldManager names the Store in the objects' managedFields.
const fieldManager = "ipamkit-kubestore"

// cursorName is the name of the IPCursor of pool on node (empty: the
// pool's own): the pool's name, or its hash when it is not a DNS-1123
// subdomain, followed by "." and the node's name; the hash of both when
// that is no name or too long.
func cursorName(pool, node string) string {
	p := pool
	if !isDNSSubdomain(p) {
		p = hash(pool)
	}
	if node == "" {
		return p
	}
	if n := p + "." + node; isDNSSubdomain(n) {
		return n
	}
	return hash(pool + "/" + node)
}

// CreateAndSetCursor creates c as Create does and, if it did, records c.IP
// as the cursor of c's pool as SetCursor does (a failure to, a hint's, is
// logged).
func (s *Store) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	c, err := s.Create(ctx, c)
	if err != nil {
		return c, err
	}
	if err := s.SetCursor(ctx, c.Pool, c.IP); err != nil {
		s.log.Warn("kubestore: cannot record the last reserved address", "pool", c.Pool, "ip", c.IP, "err", err)
	}
	return c, nil
}

// SetCursor records ip as pool's cursor in the IPCursor object of the pool
// and this Store's node (Options.Node), a server-side apply, which creates
// it if needed. With a node, each node has a cursor of its own per pool, so
// that no object is written by the allocations of every node.
func (s *Store) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: set cursor of %s: %w", pool, err)
	}
	if !ip.IsValid() {
		return fmt.Errorf("kubestore: set cursor of %s: %w", pool, errNoName)
	}
	name := cursorName(pool, s.nodeName())
	body, err := json.Marshal(&cursorObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAPIVersion, Kind: cursorKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       cursorSpec{Pool: pool, Node: s.nodeName(), IP: ip.String()},
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

// Cursor returns pool's cursor on this Store's node (Options.Node): the
// address SetCursor or CreateAndSetCursor last recorded there, or the zero
// Addr. It is a GET of one IPCursor, whatever the number of claims.
func (s *Store) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return netip.Addr{}, fmt.Errorf("kubestore: cursor of %s: %w", pool, err)
	}
	name := cursorName(pool, s.nodeName())
	raw, err := s.do(ctx, s.client.Get().Resource(CursorResource).Name(name))
	switch {
	case isObjectNotFound(err, name):
		return netip.Addr{}, nil
	case err != nil:
		return netip.Addr{}, s.fail(ctx, "cursor of", pool, "", err)
	}
	o := &cursorObject{}
	if err := json.Unmarshal(raw, o); err != nil {
		return netip.Addr{}, &CorruptError{Name: name, Field: "(object)", Value: truncate(string(raw)), Reason: err.Error()}
	}
	ip, err := netip.ParseAddr(o.Spec.IP)
	switch {
	case err != nil:
		return netip.Addr{}, &CorruptError{Name: name, Field: "spec.ip", Value: o.Spec.IP, Reason: "not an IP address"}
	case o.Spec.Pool != pool || o.Spec.Node != s.nodeName():
		return netip.Addr{}, nil // another pool's or node's, by a hash collision
	}
	return ip, nil
}
