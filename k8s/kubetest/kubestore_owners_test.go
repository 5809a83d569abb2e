package kubetest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// heldWatch is a store.WatchHandler that holds the Watch in its first Apply
// until released: what the watch reports after that event waits.
type heldWatch struct {
	reset    chan struct{}    // closed by the first Reset
	first    chan store.Event // receives the first event
	released chan struct{}    // closed to let the watch go on
	once     sync.Once
	reset1   sync.Once
}

func newHeldWatch() *heldWatch {
	return &heldWatch{reset: make(chan struct{}), first: make(chan store.Event, 1), released: make(chan struct{})}
}

func (h *heldWatch) Reset([]store.Claim) { h.reset1.Do(func() { close(h.reset) }) }

func (h *heldWatch) Apply(e store.Event) {
	h.once.Do(func() {
		h.first <- e
		<-h.released
	})
}

// wait receives from c, or fails t after a minute.
func wait[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("after a minute: %s", what)
		panic("unreachable")
	}
}

// TestOwnedAtLeastViewBehind: while the reader's Watch runs but has not
// reported a revision yet (its handler holds it in the event before),
// OwnedAtLeast and AddressClaimsAtLeast at that revision do not answer from
// what the watch has reported: they have the claim written at it. An
// answer from the view before it reaches the revision would leave out the
// claim the caller just wrote, and an Allocator would take the address of
// an owner for free.
func TestOwnedAtLeastViewBehind(t *testing.T) {
	emptyBackend(t)
	writer, reader := newStore(t), newStore(t)
	h := newHeldWatch()
	wctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- reader.Watch(wctx, h) }()
	var release sync.Once
	t.Cleanup(func() {
		release.Do(func() { close(h.released) })
		cancel()
		<-done
	})
	wait(t, "the watch's first list", h.reset)

	// The stable owner db-0 on two interfaces: the view has the first
	// claim, and the watch is held before it reports the second.
	owner := store.Owner{Namespace: "ns", Name: "db-0", UID: "behind-0", Stable: true}
	eth0, net1 := owner, owner
	eth0.Interface, net1.Interface = "eth0", "net1"
	first, err := writer.Create(t.Context(), store.Claim{Pool: "behind", IP: netip.MustParseAddr("10.68.0.1"), Owner: eth0})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, "the watch's first event", h.first); e.Claim.Key() != first.Key() {
		t.Fatalf("the watch's first event is %+v, want the claim just made, %s", e, first.Key())
	}
	second, err := writer.Create(t.Context(), store.Claim{Pool: "behind", IP: netip.MustParseAddr("10.68.0.2"), Owner: net1})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		q    store.OwnerQuery
		want []store.Claim
	}{
		{store.ByUID("behind-0").On("net1"), []store.Claim{second}},
		{store.ByName("ns", "db-0"), []store.Claim{first, second}},
	} {
		got, err := reader.OwnedAtLeast(t.Context(), tc.q, second.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got, cmpAddr, byKey); diff != "" {
			t.Errorf("OwnedAtLeast(%s, %d) while the watch is held before it (-want +got):\n%s", tc.q, second.Revision, diff)
		}
	}
	got, err := reader.AddressClaimsAtLeast(t.Context(), second.IP, second.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Claim{second}, got, cmpAddr); diff != "" {
		t.Errorf("AddressClaimsAtLeast(%s, %d) while the watch is held before it (-want +got):\n%s", second.IP, second.Revision, diff)
	}
}

// byKey orders claims by pool and address.
var byKey = cmpopts.SortSlices(func(a, b store.Claim) bool { return a.Key() < b.Key() })

// hashed is the label value kubestore gives an identity that is no valid
// label value: the first 40 hex digits of its SHA-256.
func hashed(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

// TestOwnedSharedLabel: two owners whose identities have one label value
// (one too long for a label, hashed, and another that is that hash; or a
// stable name that splits into namespace and name at another dot) are told
// apart: each owner's query finds its own claim only. A query that trusted
// the label alone would give each owner the other's address too, and a
// release would free it.
func TestOwnedSharedLabel(t *testing.T) {
	emptyBackend(t)
	s := newStore(t)
	longUID := "uid-" + strings.Repeat("0123456789", 7) // 74 characters
	longCtr := strings.Repeat("c0ffee", 11)             // 66 hex digits
	longName := "app-" + strings.Repeat("a", 70)        // a pod name too long for a label
	for n, tc := range []struct {
		name           string
		label          string // the label both claims carry
		owner1, owner2 store.Owner
	}{
		{"uid", kubestore.LabelUID,
			store.Owner{UID: longUID, Interface: "eth0"},
			store.Owner{UID: hashed(longUID), Interface: "eth0"}},
		{"container", kubestore.LabelContainer,
			store.Owner{ContainerID: longCtr, Interface: "eth0"},
			store.Owner{ContainerID: hashed(longCtr), Interface: "eth0"}},
		{"stable", kubestore.LabelStable,
			store.Owner{Namespace: "team.a", Name: "db-0", UID: "shared-stable-1", Interface: "eth0", Stable: true},
			store.Owner{Namespace: "team", Name: "a.db-0", UID: "shared-stable-2", Interface: "eth0", Stable: true}},
		{"long stable", kubestore.LabelStable,
			store.Owner{Namespace: "team.b", Name: longName, UID: "shared-stable-3", Interface: "eth0", Stable: true},
			store.Owner{Namespace: "team", Name: "b." + longName, UID: "shared-stable-4", Interface: "eth0", Stable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var claims []store.Claim
			for i, o := range []store.Owner{tc.owner1, tc.owner2} {
				ip := netip.AddrFrom4([4]byte{10, 69, byte(n), byte(i + 1)})
				c, err := s.Create(t.Context(), store.Claim{Pool: "shared", IP: ip, Owner: o})
				if err != nil {
					t.Fatal(err)
				}
				claims = append(claims, c)
			}
			// The premise: both objects carry one value of the label.
			var values []string
			for _, c := range claims {
				name, _ := kubestore.ClaimName(c.IP)
				obj, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				values = append(values, obj.GetLabels()[tc.label])
			}
			if values[0] == "" || values[0] != values[1] {
				t.Fatalf("label %s of the two claims: %q; the test wants them equal", tc.label, values)
			}
			for i, c := range claims {
				q := c.Owner.Query()
				got, err := s.Owned(t.Context(), q)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]store.Claim{c}, got, cmpAddr); diff != "" {
					t.Errorf("Owned(%s) of owner %d of 2 (-want +got):\n%s", q, i+1, diff)
				}
				got, err = s.OwnedAtLeast(t.Context(), q, claims[1].Revision)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]store.Claim{c}, got, cmpAddr); diff != "" {
					t.Errorf("OwnedAtLeast(%s) of owner %d of 2 (-want +got):\n%s", q, i+1, diff)
				}
			}
		})
	}
}
