package kubetest_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// createLegacy writes c as an IPClaim the way kubestore wrote it before
// claims were named by address: named by pool and address, labelled, with
// no owner index.
func createLegacy(t *testing.T, c store.Claim) {
	t.Helper()
	name, _ := kubestore.LegacyClaimName(c.Pool, c.IP)
	labels := map[string]string{kubestore.LabelPool: c.Pool, kubestore.LabelIP: hexIP(c.IP)}
	owner := map[string]any{"namespace": c.Owner.Namespace, "name": c.Owner.Name, "interface": c.Owner.Interface}
	if c.Owner.UID != "" {
		labels[kubestore.LabelUID] = c.Owner.UID
		owner["uid"] = c.Owner.UID
	}
	if c.Owner.ContainerID != "" {
		labels[kubestore.LabelContainer] = c.Owner.ContainerID
		owner["containerID"] = c.Owner.ContainerID
	}
	if c.Owner.Stable {
		labels[kubestore.LabelStable] = c.Owner.Namespace + "." + c.Owner.Name
		owner["stable"] = true
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kubestore.Group + "/" + kubestore.Version, "kind": "IPClaim",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"pool": c.Pool, "ip": c.IP.String(), "owner": owner},
	}}
	obj.SetLabels(labels)
	if _, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s as the old layout: %v", name, err)
	}
}

// hexIP is the LabelIP value of ip.
func hexIP(ip netip.Addr) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for _, x := range ip.AsSlice() {
		b.WriteByte(digits[x>>4])
		b.WriteByte(digits[x&15])
	}
	return b.String()
}

// TestMigrate (issue 27): IPClaims of the old layout (named by pool and
// address, no owner index) keep a Store of this version from writing, with
// an error naming the migration; Migrate moves them, leaves and reports an
// address claimed in two pools, and writes the layout marker only once no
// old object is left. Afterwards Get, Owned (by UID and by stable name) and
// an Allocator see the moved claims: the owner gets its addresses back,
// and a new owner gets none of them.
func TestMigrate(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	web := store.Owner{Namespace: "mig", Name: "web", UID: "mig-web", ContainerID: "c-web", Interface: "eth0"}
	db := store.Owner{Namespace: "mig", Name: "db-0", UID: "mig-db", ContainerID: "c-db", Interface: "eth0", Stable: true}
	other := store.Owner{Namespace: "mig", Name: "other", UID: "mig-other", Interface: "eth0"}
	legacy := []store.Claim{
		{Pool: "mig-v4", IP: netip.MustParseAddr("10.70.0.2"), Owner: web},
		{Pool: "mig-v6", IP: netip.MustParseAddr("fd00:70::2"), Owner: web},
		{Pool: "mig-v4", IP: netip.MustParseAddr("10.70.0.3"), Owner: db},
		// One address in two pools: the first by name (mig-v4) moves.
		{Pool: "mig-v4", IP: netip.MustParseAddr("10.70.0.4"), Owner: other},
		{Pool: "mig-x", IP: netip.MustParseAddr("10.70.0.4"), Owner: other},
	}
	for _, c := range legacy {
		createLegacy(t, c)
	}

	s := newStore(t)
	_, err := s.Create(ctx, store.Claim{Pool: "mig-v4", IP: netip.MustParseAddr("10.70.0.5"), Owner: other})
	if !errors.Is(err, kubestore.ErrLegacyLayout) || !strings.Contains(err.Error(), kubestore.MigrateCommand) {
		t.Fatalf("Create before the migration: %v, want ErrLegacyLayout naming %q", err, kubestore.MigrateCommand)
	}

	res, err := newStore(t).Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 4 || len(res.Left) != 1 || res.Marked || !strings.Contains(res.Left[0].Error(), `"mig-x.10.70.0.4"`) ||
		!strings.Contains(res.Left[0].Error(), `claimed in pool "mig-v4" too`) {
		t.Fatalf("Migrate = %+v, want 4 moved, mig-x.10.70.0.4 left as claimed in two pools, no marker", res)
	}
	if _, err := s.Create(ctx, store.Claim{Pool: "mig-v4", IP: netip.MustParseAddr("10.70.0.5"), Owner: other}); !errors.Is(err, kubestore.ErrLegacyLayout) {
		t.Fatalf("Create with an old object left: %v, want ErrLegacyLayout", err)
	}
	left, _ := kubestore.LegacyClaimName("mig-x", netip.MustParseAddr("10.70.0.4"))
	if err := dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).Delete(ctx, left, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = newStore(t).Migrate(ctx)
	if err != nil || res.Moved != 0 || len(res.Left) != 0 || !res.Marked {
		t.Fatalf("Migrate again = %+v, %v; want nothing moved, the marker written", res, err)
	}

	// The claims, as the old objects had them, under their new names.
	s = newStore(t)
	for _, c := range legacy[:4] {
		got, err := s.Get(ctx, c.Pool, c.IP)
		if err != nil {
			t.Fatalf("Get(%s) after the migration: %v", c.Key(), err)
		}
		if got.Owner != c.Owner {
			t.Errorf("Get(%s) after the migration: owner %+v, want %+v", c.Key(), got.Owner, c.Owner)
		}
	}
	for q, want := range map[store.OwnerQuery][]store.Claim{
		store.ByUID("mig-web"):      legacy[:2],
		store.ByName("mig", "db-0"): legacy[2:3],
		store.ByUID("mig-db"):       legacy[2:3],
	} {
		got, err := s.Owned(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpAddr, byKey, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Revision" }, cmp.Ignore())); diff != "" {
			t.Errorf("Owned(%s) after the migration (-want +got):\n%s", q, diff)
		}
	}

	// An Allocator: web gets its addresses back; a new pod none of the
	// moved ones (10.70.0.1 is the gateway).
	cat, err := ipam.NewCatalog(
		&ipam.Pool{Name: "mig-v4", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.70.0.0/29")}}},
		&ipam.Pool{Name: "mig-v6", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("fd00:70::/125")}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	nic := []ipam.NIC{{Name: "eth0", Pools: []string{"mig-v4", "mig-v6"}}}
	res2, err := a.Allocate(ctx, ipam.Request{Namespace: "mig", Name: "web", UID: "mig-web", ContainerID: "c-web", Interfaces: nic})
	if err != nil {
		t.Fatal(err)
	}
	if got := []netip.Addr{res2.IPs[0].Address.Addr(), res2.IPs[1].Address.Addr()}; got[0] != legacy[0].IP || got[1] != legacy[1].IP {
		t.Fatalf("web after the migration got %v, want its addresses %s and %s back", got, legacy[0].IP, legacy[1].IP)
	}
	res3, err := a.Allocate(ctx, ipam.Request{Namespace: "mig", Name: "new", UID: "mig-new", Interfaces: nic[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if ip := res3.IPs[0].Address.Addr(); ip.Compare(netip.MustParseAddr("10.70.0.5")) < 0 {
		t.Fatalf("a new pod got %s, an address a moved claim holds", ip)
	}
}
