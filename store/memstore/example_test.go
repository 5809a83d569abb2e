package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// Claiming an address: the first Create wins, a second fails with ErrExists, and
// the holder releases it by naming the revision it was given.
func Example() {
	ctx := context.Background()
	s := memstore.New()
	ip := netip.MustParseAddr("10.0.0.7")
	at := time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC)

	web, err := s.Create(ctx, store.Claim{Pool: "blue", IP: ip, Time: at,
		Owner: store.Owner{Namespace: "default", Name: "web-0", UID: "1234", Interface: "eth0"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(web.Key(), "held by", web.Owner, "at revision", web.Revision)

	_, err = s.Create(ctx, store.Claim{Pool: "blue", IP: ip, Time: at,
		Owner: store.Owner{Namespace: "default", Name: "db-0", UID: "5678", Interface: "eth0"}})
	fmt.Println(errors.Is(err, store.ErrExists), err)

	err = s.Delete(ctx, "blue", ip, web.Revision)
	fmt.Println("released:", err == nil)
	_, err = s.Get(ctx, "blue", ip)
	fmt.Println(errors.Is(err, store.ErrNotFound), err)
	// Output:
	// blue/10.0.0.7 held by default/web-0 (uid 1234) eth0 at revision 1
	// true memstore: create blue/10.0.0.7: address already claimed
	// released: true
	// true memstore: get blue/10.0.0.7: claim not found
}

// Update re-points a claim only if nobody changed it since it was read: a writer
// holding a stale revision gets ErrConflict and must read again.
func ExampleStore_Update() {
	ctx := context.Background()
	s := memstore.New()
	ip := netip.MustParseAddr("2001:db8::7")
	c, err := s.Create(ctx, store.Claim{Pool: "blue", IP: ip, Owner: store.Owner{ContainerID: "abc"}})
	if err != nil {
		panic(err)
	}

	moved := c
	moved.Owner = store.Owner{ContainerID: "def"}
	moved, err = s.Update(ctx, moved, c.Revision)
	fmt.Println(moved.Owner, "at revision", moved.Revision, err)

	late := c
	late.Owner = store.Owner{ContainerID: "ghi"}
	_, err = s.Update(ctx, late, c.Revision)
	fmt.Println(errors.Is(err, store.ErrConflict), err)
	// Output:
	// container def at revision 2 <nil>
	// true memstore: update blue/2001:db8::7 at revision 1 (current 2): revision conflict
}

// Two Stores opened on one backend see each other's claims and race for the same
// addresses, as two clients of one etcd cluster would.
func ExampleStore_Open() {
	ctx := context.Background()
	a := memstore.New()
	b := a.Open()
	ip := netip.MustParseAddr("10.0.0.7")

	_, err := a.Create(ctx, store.Claim{Pool: "blue", IP: ip, Owner: store.Owner{ContainerID: "abc"}})
	fmt.Println(err)
	_, err = b.Create(ctx, store.Claim{Pool: "blue", IP: ip, Owner: store.Owner{ContainerID: "def"}})
	fmt.Println(errors.Is(err, store.ErrExists))
	c, err := b.Get(ctx, "blue", ip)
	fmt.Println(c.Owner, err)

	// New, unlike Open, starts another backend.
	claims, err := memstore.New().List(ctx, "blue")
	fmt.Println(len(claims), err)
	// Output:
	// <nil>
	// true
	// container abc <nil>
	// 0 <nil>
}

// The cursor is a per-pool hint of the last address reserved; unset, it is the
// zero Addr.
func ExampleStore_SetCursor() {
	ctx := context.Background()
	s := memstore.New()

	ip, _ := s.Cursor(ctx, "blue")
	fmt.Println(ip.IsValid())

	_ = s.SetCursor(ctx, "blue", netip.MustParseAddr("10.0.0.7"))
	ip, _ = s.Cursor(ctx, "blue")
	fmt.Println(ip)
	ip, _ = s.Open().Cursor(ctx, "blue")
	fmt.Println(ip)
	// Output:
	// false
	// 10.0.0.7
	// 10.0.0.7
}

// CreateAndSetCursor claims an address and moves the pool's cursor to it in one
// call; when the claim fails, the cursor stays where it was.
func ExampleStore_CreateAndSetCursor() {
	ctx := context.Background()
	s := memstore.New()
	abc := store.Owner{ContainerID: "abc"}

	c, err := s.CreateAndSetCursor(ctx, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.7"), Owner: abc})
	fmt.Println(c.Key(), err)
	ip, _ := s.Cursor(ctx, "blue")
	fmt.Println(ip)

	taken := store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.9"), Owner: store.Owner{ContainerID: "def"}}
	_, _ = s.Create(ctx, taken)
	_, err = s.CreateAndSetCursor(ctx, store.Claim{Pool: "blue", IP: taken.IP, Owner: abc})
	fmt.Println(errors.Is(err, store.ErrExists))
	ip, _ = s.Cursor(ctx, "blue")
	fmt.Println(ip)
	// Output:
	// blue/10.0.0.7 <nil>
	// 10.0.0.7
	// true
	// 10.0.0.7
}
