//go:build linux

package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// Claiming an address writes host-local's file for it; a second Create of the
// address fails with store.ErrExists, and the holder releases it at the
// revision it was given.
func Example() {
	dataDir, err := os.MkdirTemp("", "cni-networks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)
	dir := filepath.Join(dataDir, "mynet")

	ctx := context.Background()
	s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{
		{Name: "mynet/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}},
	}})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	ip := netip.MustParseAddr("10.1.2.2")
	c, err := s.Create(ctx, store.Claim{Pool: "mynet/0", IP: ip, Owner: store.Owner{ContainerID: "example", Interface: "dummy0"}})
	if err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "10.1.2.2"))
	fmt.Printf("%s holds %q (%d bytes)\n", c.IP, b, len(b))

	_, err = s.Create(ctx, store.Claim{Pool: "mynet/0", IP: ip, Owner: store.Owner{ContainerID: "other", Interface: "eth0"}})
	fmt.Println(errors.Is(err, store.ErrExists))

	fmt.Println(s.Delete(ctx, "mynet/0", ip, c.Revision))
	_, err = os.Stat(filepath.Join(dir, "10.1.2.2"))
	fmt.Println(errors.Is(err, os.ErrNotExist))
	// Output:
	// 10.1.2.2 holds "example\r\ndummy0" (15 bytes)
	// true
	// <nil>
	// true
}

// A directory written by host-local is read as it is, including files in the
// legacy form that holds only a container ID, and the cursor file.
func ExampleStore_List() {
	dataDir, err := os.MkdirTemp("", "cni-networks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)
	dir := filepath.Join(dataDir, "mynet")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "10.1.2.2"), []byte("example\r\ndummy0"), 0o600)
	os.WriteFile(filepath.Join(dir, "10.1.2.3"), []byte("legacyid\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "last_reserved_ip.0"), []byte("10.1.2.3"), 0o600)

	ctx := context.Background()
	s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{
		{Name: "mynet/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}},
	}})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	claims, err := s.List(ctx, "mynet/0")
	if err != nil {
		panic(err)
	}
	for _, ip := range []string{"10.1.2.2", "10.1.2.3"} {
		for _, c := range claims {
			if c.IP.String() == ip {
				fmt.Printf("%s: %v\n", c.IP, c.Owner)
			}
		}
	}
	cursor, err := s.Cursor(ctx, "mynet/0")
	fmt.Println("last reserved:", cursor, err)
	// Output:
	// 10.1.2.2: container example dummy0
	// 10.1.2.3: container legacyid
	// last reserved: 10.1.2.3 <nil>
}

// A corrupt file, such as the empty file a host-local killed between creating
// and writing it leaves, is reported by List with the file's name, next to the
// claims that could be read; its address stays taken.
func ExampleCorruptError() {
	dataDir, err := os.MkdirTemp("", "cni-networks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)
	dir := filepath.Join(dataDir, "mynet")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "10.1.2.2"), []byte("example\r\ndummy0"), 0o600)
	os.WriteFile(filepath.Join(dir, "10.1.2.3"), nil, 0o600)

	ctx := context.Background()
	s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{
		{Name: "mynet/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}},
	}})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	claims, err := s.List(ctx, "mynet/0")
	fmt.Println(len(claims), "claim:", claims[0].IP, claims[0].Owner)
	var ce *filestore.CorruptError
	if errors.As(err, &ce) {
		fmt.Println(filepath.Base(ce.Path), ce.Reason)
	}
	_, err = s.Create(ctx, store.Claim{Pool: "mynet/0", IP: ce.IP, Owner: store.Owner{ContainerID: "new", Interface: "eth0"}})
	fmt.Println(errors.Is(err, store.ErrExists))

	// Removing it at the revision the error reports frees the address.
	fmt.Println(s.Delete(ctx, "mynet/0", ce.IP, ce.Revision))
	// Output:
	// 1 claim: 10.1.2.2 container example dummy0
	// 10.1.2.3 empty file
	// true
	// <nil>
}

// CreateExclusive serves a container once per interface and IP family: a
// second address of the same family on the same interface is refused with a
// *store.HeldError naming the claim that stands in the way, even from
// another process. Owned finds a container's claims through the owner index
// beside the network directory, without reading other containers' files.
func ExampleStore_CreateExclusive() {
	dataDir, err := os.MkdirTemp("", "cni-networks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)

	ctx := context.Background()
	s, err := filestore.Open(filepath.Join(dataDir, "mynet"), filestore.Options{Pools: []filestore.Pool{
		{Name: "mynet/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}},
		{Name: "mynet/1", Index: 1, Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}},
	}})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	eth0 := store.Owner{ContainerID: "example", Interface: "eth0"}
	for _, c := range []store.Claim{
		{Pool: "mynet/0", IP: netip.MustParseAddr("10.1.2.2"), Owner: eth0},
		{Pool: "mynet/1", IP: netip.MustParseAddr("2001:db8:1::2"), Owner: eth0},
		{Pool: "mynet/0", IP: netip.MustParseAddr("10.1.2.3"), Owner: eth0},
	} {
		_, err := s.CreateExclusive(ctx, c)
		var held *store.HeldError
		switch {
		case errors.As(err, &held):
			fmt.Printf("%s refused: %s holds %s\n", c.IP, c.Owner, held.Held[0].IP)
		case err != nil:
			panic(err)
		default:
			fmt.Printf("%s created\n", c.IP)
		}
	}
	claims, err := s.Owned(ctx, store.ByContainer("example").On("eth0"))
	if err != nil {
		panic(err)
	}
	fmt.Println(len(claims), "claims")
	link, _ := os.Readlink(filepath.Join(dataDir, ".ipam-owners", "mynet", "example"))
	fmt.Println("index entry:", link)
	// Output:
	// 10.1.2.2 created
	// 2001:db8:1::2 created
	// 10.1.2.3 refused: container example eth0 holds 10.1.2.2
	// 2 claims
	// index entry: 10.1.2.2,2001:db8:1::2
}
