package etcdtest_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
)

// claimKey is the key of the claim of ip in pool under prefix, as the
// package documentation lays it out (for a pool name without "/" or "%").
func claimKey(prefix, pool string, ip netip.Addr) string {
	if ip.Is4() {
		a := ip.As4()
		return prefix + "claims/" + pool + "/4/" + hex.EncodeToString(a[:])
	}
	a := ip.As16()
	return prefix + "claims/" + pool + "/6/" + hex.EncodeToString(a[:])
}

// addr4 returns the IPv4 address 10.0.0.0 + n.
func addr4(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// index4 reverses addr4.
func index4(ip netip.Addr) int {
	a := ip.As4()
	return int(a[1])<<16 | int(a[2])<<8 | int(a[3])
}

// List reads a pool in pages all at one revision: while a writer keeps
// sliding a window of claims along the pool, one transaction per step (it
// deletes the lowest and adds one past the highest), every List returns one
// window, whole, never a mix of two.
func TestListPagesConsistent(t *testing.T) {
	prefix := newPrefix(t)
	s, err := etcdstore.New(etcdstore.Options{Endpoints: single.Endpoints(), Prefix: prefix, ListPageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cli := rawClient(t, single.Endpoints())
	ctx := t.Context()
	const window = 100
	val := func(n int) string {
		return fmt.Sprintf(`{"pool":"blue","ip":%q,"owner":{"uid":"u%d"}}`, addr4(n), n)
	}
	for n := range window {
		if _, err := cli.Put(ctx, claimKey(prefix, "blue", addr4(n)), val(n)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var steps int
	wg.Go(func() {
		for lo := 0; ; lo++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := cli.Txn(ctx).Then(
				clientv3.OpDelete(claimKey(prefix, "blue", addr4(lo))),
				clientv3.OpPut(claimKey(prefix, "blue", addr4(lo+window)), val(lo+window)),
			).Commit()
			if err != nil {
				t.Error(err)
				return
			}
			steps++
		}
	})
	for range 20 {
		cs, err := s.List(ctx, "blue")
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != window {
			t.Fatalf("List returned %d claims, want a window of %d", len(cs), window)
		}
		for i, c := range cs {
			if c.IP != addr4(index4(cs[0].IP)+i) {
				t.Fatalf("List returned %s at %d after %s: not one window", c.IP, i, cs[0].IP)
			}
		}
	}
	close(stop)
	wg.Wait()
	if steps < 20 {
		t.Errorf("the writer made only %d steps during 20 Lists: the check did not race", steps)
	}
}

// Records the Store cannot read are reported, named by key, without losing
// the others, and their addresses stay taken.
func TestCorruptRecords(t *testing.T) {
	prefix := newPrefix(t)
	s := open(t, single, prefix)
	cli := rawClient(t, single.Endpoints())
	ctx := t.Context()
	good, err := s.Create(ctx, claimOf("blue", "10.0.0.1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		claimKey(prefix, "blue", addr4(2)):    "not json",
		claimKey(prefix, "blue", addr4(3)):    `{"pool":"blue","ip":"10.0.0.4","owner":{"uid":"u"}}`, // another address
		claimKey(prefix, "blue", addr4(4)):    `{"pool":"blue","ip":"10.0.0.4"}`,                     // no owner
		prefix + "claims/blue/4/0A000005":     `{}`,                                                  // not the layout
		prefix + "claims/blue/9/0a000006/zzz": `{}`,
	}
	for k, v := range bad {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.List(ctx, "blue")
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("List: %v, want an error wrapping store.ErrCorrupt", err)
	}
	if diff := cmp.Diff([]store.Claim{good}, got, cmpClaims); diff != "" {
		t.Errorf("List with corrupt records (-want +got):\n%s", diff)
	}
	for k := range bad {
		if !strings.Contains(err.Error(), fmt.Sprintf("key %q", k)) {
			t.Errorf("List's error does not name the corrupt key %q:\n%v", k, err)
		}
	}

	var ce *etcdstore.CorruptError
	_, err = s.Get(ctx, "blue", addr4(2))
	if !errors.As(err, &ce) || ce.Key != claimKey(prefix, "blue", addr4(2)) || ce.Revision == 0 {
		t.Fatalf("Get of a corrupt record: %v, want a *CorruptError naming its key and revision", err)
	}
	if _, err := s.Create(ctx, claimOf("blue", "10.0.0.2", "b")); !errors.Is(err, store.ErrExists) {
		t.Errorf("Create over a corrupt record: %v, want store.ErrExists", err)
	}
	// A repair tool replaces it, or removes it, at its revision.
	fixed, err := s.Update(ctx, claimOf("blue", "10.0.0.2", "b"), ce.Revision)
	if err != nil {
		t.Fatalf("Update of a corrupt record at its revision: %v", err)
	}
	if err := s.Delete(ctx, "blue", fixed.IP, fixed.Revision); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if owned, err := s.Owned(ctx, store.ByUID("uid-b")); err != nil || len(owned) != 0 {
		t.Errorf("Owned(uid-b) after the repair and the delete = %v, %v; want none", owned, err)
	}

	// A corrupt owner record is reported with the others.
	if _, err := cli.Put(ctx, prefix+"owners/uid/uid-a/4/eth0/blue/0a000009", "junk"); err != nil {
		t.Fatal(err)
	}
	owned, err := s.Owned(ctx, store.ByUID("uid-a"))
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "0a000009") {
		t.Errorf("Owned with a corrupt owner record: %v, want store.ErrCorrupt naming it", err)
	}
	if diff := cmp.Diff([]store.Claim{good}, owned, cmpClaims); diff != "" {
		t.Errorf("Owned with a corrupt owner record (-want +got):\n%s", diff)
	}

	if _, err := cli.Put(ctx, prefix+"pools/blue", "10.0.0.300"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cursor(ctx, "blue"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Cursor of a corrupt cursor: %v, want store.ErrCorrupt", err)
	}
}

// Stores with different prefixes share one etcd without seeing each other,
// even when one prefix starts with the other's name.
func TestPrefixesIsolate(t *testing.T) {
	base := newPrefix(t)
	a, b := open(t, single, base+"a"), open(t, single, base+"a-2")
	ctx := t.Context()
	ca, err := a.CreateAndSetCursor(ctx, claimOf("blue", "10.0.0.1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.CreateAndSetCursor(ctx, claimOf("blue", "10.0.0.1", "x"))
	if err != nil {
		t.Fatalf("the same address under another prefix: %v", err)
	}
	for _, tc := range []struct {
		s    *etcdstore.Store
		want store.Claim
	}{{a, ca}, {b, cb}} {
		got, err := tc.s.List(ctx, "blue")
		if err != nil || len(got) != 1 || got[0].Revision != tc.want.Revision {
			t.Errorf("List under %s = %v, %v; want only %+v", tc.s.Prefix(), got, err, tc.want)
		}
		owned, err := tc.s.Owned(ctx, store.ByUID("uid-x"))
		if err != nil || len(owned) != 1 || owned[0].Revision != tc.want.Revision {
			t.Errorf("Owned under %s = %v, %v; want only %+v", tc.s.Prefix(), owned, err, tc.want)
		}
	}
	if err := a.Delete(ctx, "blue", ca.IP, ca.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "blue", cb.IP); err != nil {
		t.Errorf("a Delete under one prefix removed the claim under the other: %v", err)
	}
	if got := a.Prefix(); got != base+"a/" {
		t.Errorf("Prefix() = %q, want %q", got, base+"a/")
	}
}

// Errors name the operation, the pool, the address and the key.
func TestErrorsNameTheClaim(t *testing.T) {
	prefix := newPrefix(t)
	s := open(t, single, prefix)
	ctx := t.Context()
	c, err := s.Create(ctx, claimOf("blue", "10.0.0.1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("(key %q)", claimKey(prefix, "blue", c.IP))
	_, errCreate := s.Create(ctx, claimOf("blue", "10.0.0.1", "b"))
	errDelete := s.Delete(ctx, "blue", c.IP, c.Revision+100)
	_, errUpdate := s.Update(ctx, claimOf("blue", "10.0.0.7", "b"), 5)
	_, errZone := s.Create(ctx, claimOf("blue", "fe80::1%eth0", "b"))
	for _, tc := range []struct {
		err  error
		want string
		is   error
	}{
		{errCreate, "etcdstore: create blue/10.0.0.1 " + key + ": address already claimed", store.ErrExists},
		{errDelete, fmt.Sprintf("etcdstore: delete blue/10.0.0.1 %s: at revision %d (current %d): revision conflict",
			key, c.Revision+100, c.Revision), store.ErrConflict},
		{errUpdate, "etcdstore: update blue/10.0.0.7", store.ErrNotFound},
		{errZone, "etcdstore: create blue/fe80::1%eth0: ip has a zone", nil},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) || tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("error %v, want one starting %q wrapping %v", tc.err, tc.want, tc.is)
		}
	}
}

// With no member reachable, every call fails with ErrUnavailable at its
// deadline, or at Options.Timeout when that comes sooner, and the error
// names the claim. A call that waited for a later deadline (a minute) or
// none would take a minute or forever: the bound allows ten seconds more
// than the timeout, for a loaded machine.
func TestUnreachable(t *testing.T) {
	p := newProxy(t, single.Members[0].ClientURL()[len("http://"):])
	p.Cut()
	const timeout = 300 * time.Millisecond
	s, err := etcdstore.New(etcdstore.Options{Endpoints: []string{p.Addr()}, Prefix: newPrefix(t), Timeout: timeout})
	if err != nil {
		t.Fatalf("New with an unreachable member: %v, want success (it connects in the background)", err)
	}
	t.Cleanup(func() { s.Close() })
	var wg sync.WaitGroup
	// No deadline, one sooner than the timeout, and one much later.
	for _, ctx := range []context.Context{context.Background(), deadline(t, 200*time.Millisecond), deadline(t, time.Minute)} {
		for _, call := range storeCalls(s) {
			wg.Go(func() {
				start := time.Now()
				err := call.f(ctx)
				took := time.Since(start)
				if !errors.Is(err, etcdstore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want ErrUnavailable and context.DeadlineExceeded", call.name, err)
				}
				if took > timeout+10*time.Second {
					t.Errorf("%s took %s, with a deadline of at most %s", call.name, took, timeout)
				}
				if err != nil && !strings.Contains(err.Error(), call.names) {
					t.Errorf("%s: %v does not name %s", call.name, err, call.names)
				}
			})
		}
	}
	wg.Wait()
}

// deadline returns a context that expires after d, canceled when t ends.
func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// storeCall is one call of every Store method, for the availability
// checks.
type storeCall struct {
	name, names string
	f           func(ctx context.Context) error
}

// storeCalls returns a call of each method of s, each about its own
// address of pool "blue" so that callers can tell them apart.
func storeCalls(s *etcdstore.Store) []storeCall {
	c := claimOf("blue", "10.9.0.1", "unavailable")
	ip := c.IP
	return []storeCall{
		{"Get", "blue/10.9.0.1", func(ctx context.Context) error { _, err := s.Get(ctx, "blue", ip); return err }},
		{"List", "list blue", func(ctx context.Context) error { _, err := s.List(ctx, "blue"); return err }},
		{"Create", "blue/10.9.0.1", func(ctx context.Context) error { _, err := s.Create(ctx, c); return err }},
		{"CreateAndSetCursor", "blue/10.9.0.1", func(ctx context.Context) error { _, err := s.CreateAndSetCursor(ctx, c); return err }},
		{"CreateExclusive", "blue/10.9.0.1", func(ctx context.Context) error { _, err := s.CreateExclusive(ctx, c); return err }},
		{"Update", "blue/10.9.0.1", func(ctx context.Context) error { _, err := s.Update(ctx, c, 7); return err }},
		{"Delete", "blue/10.9.0.1", func(ctx context.Context) error { return s.Delete(ctx, "blue", ip, 7) }},
		{"Owned", `uid "uid-unavailable"`, func(ctx context.Context) error { _, err := s.Owned(ctx, store.ByUID("uid-unavailable")); return err }},
		{"Cursor", "cursor blue", func(ctx context.Context) error { _, err := s.Cursor(ctx, "blue"); return err }},
		{"SetCursor", "cursor blue to 10.9.0.1", func(ctx context.Context) error { return s.SetCursor(ctx, "blue", ip) }},
		{"PoolVersion", "pool version blue", func(ctx context.Context) error { _, err := s.PoolVersion(ctx, "blue"); return err }},
	}
}

// The keys are those the package documentation lays out.
func TestKeyLayout(t *testing.T) {
	prefix := newPrefix(t)
	s := open(t, single, prefix)
	ctx := t.Context()
	c := store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.7"), Time: watchTime,
		Owner: store.Owner{Namespace: "ns", Name: "db-0", UID: "1234", ContainerID: "abc", Interface: "eth0", Stable: true}}
	if _, err := s.CreateExclusive(ctx, c); err != nil {
		t.Fatal(err)
	}
	v6 := store.Claim{Pool: "green/x", IP: netip.MustParseAddr("2001:db8::1"), Time: watchTime,
		Owner: store.Owner{ContainerID: "def"}}
	if _, err := s.Create(ctx, v6); err != nil {
		t.Fatal(err)
	}
	resp, err := rawClient(t, single.Endpoints()).Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, strings.TrimPrefix(string(kv.Key), prefix))
	}
	want := []string{
		"claims/blue/4/0a000007",
		"claims/green%2Fx/6/20010db8000000000000000000000001",
		"owners/container/abc/4/eth0/blue/0a000007",
		"owners/container/def/6//green%2Fx/20010db8000000000000000000000001",
		"owners/name/ns%2Fdb-0/4/eth0/blue/0a000007",
		"owners/uid/1234/4/eth0/blue/0a000007",
		"pools/blue",
		"pools/green%2Fx",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys under the prefix (-want +got):\n%s", diff)
	}
}

// An owner record that cannot be read stands in the way of CreateExclusive
// as what it is, not as a taken address.
func TestCreateExclusiveCorruptOwnerRecord(t *testing.T) {
	prefix := newPrefix(t)
	s := open(t, single, prefix)
	key := prefix + "owners/uid/uid-a/4/eth0/green/0a000009"
	if _, err := rawClient(t, single.Endpoints()).Put(t.Context(), key, "junk"); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateExclusive(t.Context(), claimOf("blue", "10.0.0.1", "a"))
	if !errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), key) {
		t.Errorf("CreateExclusive with a corrupt owner record in the way: %v, want store.ErrCorrupt naming %q", err, key)
	}
	if _, err := s.Get(t.Context(), "blue", netip.MustParseAddr("10.0.0.1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after the refused CreateExclusive: %v, want store.ErrNotFound", err)
	}
}

// A pool's record keeps its cursor through the writes that do not move it,
// and each of them changes the pool's version.
func TestPoolRecord(t *testing.T) {
	s := open(t, single, newPrefix(t))
	ctx := t.Context()
	version := func() uint64 {
		t.Helper()
		v, err := s.PoolVersion(ctx, "blue")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cursor := func() netip.Addr {
		t.Helper()
		ip, err := s.Cursor(ctx, "blue")
		if err != nil {
			t.Fatal(err)
		}
		return ip
	}
	// A pool's first claim made without a cursor leaves it without one.
	first, err := s.Create(ctx, claimOf("blue", "10.0.0.9", "first"))
	if err != nil {
		t.Fatal(err)
	}
	if ip := cursor(); ip.IsValid() {
		t.Errorf("cursor after a Create = %s, want none", ip)
	}
	if _, err := s.CreateAndSetCursor(ctx, claimOf("blue", "10.0.0.1", "a")); err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddr("10.0.0.1")
	writes := []struct {
		what string
		do   func() error
	}{
		{"Create", func() error { _, err := s.Create(ctx, claimOf("blue", "10.0.0.5", "b")); return err }},
		{"Update", func() error {
			first.Owner = claimOf("", "10.0.0.9", "moved").Owner
			var err error
			first, err = s.Update(ctx, first, first.Revision)
			return err
		}},
		{"Delete", func() error { return s.Delete(ctx, "blue", first.IP, first.Revision) }},
	}
	for _, w := range writes {
		before := version()
		if err := w.do(); err != nil {
			t.Fatalf("%s: %v", w.what, err)
		}
		if after := version(); after == before {
			t.Errorf("pool version %d before and after a %s", before, w.what)
		}
		if got := cursor(); got != want {
			t.Errorf("cursor after a %s = %s, want %s", w.what, got, want)
		}
	}
	if err := s.SetCursor(ctx, "blue", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if ip := cursor(); ip.IsValid() {
		t.Errorf("cursor after forgetting it = %s, want none", ip)
	}
}

// AddressClaims finds an address in more pools than one etcd transaction
// may read, pools made by another Store after this one listed them
// included.
func TestAddressClaimsManyPools(t *testing.T) {
	prefix := newPrefix(t)
	reader, writer := open(t, single, prefix), open(t, single, prefix)
	ctx := t.Context()
	ip := netip.MustParseAddr("10.0.0.1")
	count := func() int {
		t.Helper()
		cs, err := reader.AddressClaims(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	for i := range 300 {
		if _, err := writer.Create(ctx, claimOf(fmt.Sprintf("p%03d", i), "10.0.0.1", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == 299 {
			if n := count(); n != i+1 {
				t.Fatalf("AddressClaims found %d claims in %d pools", n, i+1)
			}
		}
	}
	if _, err := writer.Create(ctx, claimOf("other", "10.0.0.2", "x")); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 300 {
		t.Errorf("AddressClaims found %d claims, want 300", n)
	}
}

// A Store remembers the claims it read or wrote, to know which owner records
// an Update or a Delete removes; a claim another client has replaced since
// is not the one it remembers. Store a writes a claim (and remembers it), b
// gives the address to another owner, then a updates or deletes the claim at
// b's revision: the owner records removed are those of b's owner, and every
// owner's Owned answers what the claims say. A Store that took the claim it
// remembers without checking its revision would remove the first owner's
// records (gone already) and leave b's owner holding an address it has not.
func TestRecentClaimOfAnotherRevision(t *testing.T) {
	prefix := newPrefix(t)
	// A Store's Owned remembers what it finds: r reads for the test, so
	// that a keeps the claim it wrote.
	a, b, r := open(t, single, prefix), open(t, single, prefix), open(t, single, prefix)
	ctx := t.Context()
	owned := func(t *testing.T, id string, want ...store.Claim) {
		t.Helper()
		got, err := r.Owned(ctx, store.ByUID("uid-"+id))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpClaims, byKey); diff != "" {
			t.Errorf("Owned(uid-%s) (-want +got):\n%s", id, diff)
		}
	}
	// handOver has a create a claim of ip for owner first, and b give it
	// to owner second; it returns b's claim.
	handOver := func(t *testing.T, ip, first, second string) store.Claim {
		t.Helper()
		c, err := a.Create(ctx, claimOf("blue", ip, first))
		if err != nil {
			t.Fatal(err)
		}
		next := claimOf("blue", ip, second)
		next, err = b.Update(ctx, next, c.Revision)
		if err != nil {
			t.Fatal(err)
		}
		owned(t, first)
		owned(t, second, next)
		return next
	}

	t.Run("Delete", func(t *testing.T) {
		c := handOver(t, "10.0.0.1", "d1", "d2")
		if err := a.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
			t.Fatal(err)
		}
		owned(t, "d1")
		owned(t, "d2")
	})
	t.Run("Update", func(t *testing.T) {
		c := handOver(t, "10.0.0.2", "u1", "u2")
		next, err := a.Update(ctx, claimOf("blue", "10.0.0.2", "u3"), c.Revision)
		if err != nil {
			t.Fatal(err)
		}
		owned(t, "u1")
		owned(t, "u2")
		owned(t, "u3", next)
	})
	resp, err := rawClient(t, single.Endpoints()).Get(ctx, prefix+"owners/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), prefix))
	}
	// u3's records only: its UID, its container ID (no namespace/name: not
	// stable).
	if len(keys) != 2 || !strings.Contains(keys[0], "u3") || !strings.Contains(keys[1], "u3") {
		t.Errorf("owner records left: %q, want u3's two", keys)
	}
}
