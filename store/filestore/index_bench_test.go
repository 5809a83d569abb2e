//go:build linux

package filestore_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// ownerIndexClaims are the sizes BenchmarkOwnerIndex runs at. The default
// keeps CI's single run short: filling 60,000 files, building their index and
// scanning them take a minute there.
var ownerIndexClaims = flag.String("owner-index-claims", "1000,4000",
	"BenchmarkOwnerIndex: comma-separated numbers of claim files in the directory (the figures: 1000,4000,60000)")

// BenchmarkOwnerIndex measures, in a directory of n claim files written as
// host-local writes them (each its own container's), what the owner index
// answers against the scan of every claim file that it replaces:
//
//   - Owned/new: Owned of a container that holds nothing, on eth0, as the
//     CNI ADD of a new container asks;
//   - Owned/holder: Owned of a container that holds one claim;
//   - CreateExclusive: CreateExclusive of a new container's claim at a free
//     address, and the Delete that frees it again (so the count stays put);
//     the scan is Owned by scan, the conflict check and CreateAndSetCursor;
//   - Rebuild: Owned/new after another program changed the directory, which
//     makes the index rebuild (the cost of a stale index), against the scan.
func BenchmarkOwnerIndex(b *testing.B) {
	for f := range strings.SplitSeq(*ownerIndexClaims, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("-owner-index-claims %q: %v", *ownerIndexClaims, err)
		}
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			s, dir := benchStore(b, n)
			ctx := context.Background()
			newCtr := store.ByContainer("0123456789abcdef").On("eth0")
			holder := store.ByContainer("ctr5")
			owned := map[string]func(context.Context, store.OwnerQuery) ([]store.Claim, error){
				"index": s.Owned,
				"scan": func(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
					return filestore.OwnedByScan(ctx, s, q)
				},
			}
			for _, how := range []string{"index", "scan"} {
				b.Run("Owned/new/"+how, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if cs, err := owned[how](ctx, newCtr); err != nil || len(cs) != 0 {
							b.Fatal(cs, err)
						}
					}
				})
				b.Run("Owned/holder/"+how, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if cs, err := owned[how](ctx, holder); err != nil || len(cs) != 1 {
							b.Fatal(cs, err)
						}
					}
				})
			}
			c := store.Claim{Pool: "net/0", IP: netip.MustParseAddr("10.255.0.1"),
				Owner: store.Owner{ContainerID: "0123456789abcdef", Interface: "eth0"}, Time: time.Now()}
			create := map[string]func() (store.Claim, error){
				"index": func() (store.Claim, error) { return s.CreateExclusive(ctx, c) },
				"scan": func() (store.Claim, error) {
					held, err := filestore.OwnedByScan(ctx, s, c.Owner.Query())
					if err != nil {
						return store.Claim{}, err
					}
					for _, h := range held {
						if store.Conflicts(c, h) {
							return store.Claim{}, &store.HeldError{Claim: c, Held: held}
						}
					}
					return s.CreateAndSetCursor(ctx, c)
				},
			}
			for _, how := range []string{"index", "scan"} {
				b.Run("CreateExclusive/"+how, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						got, err := create[how]()
						if err != nil {
							b.Fatal(err)
						}
						if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("Rebuild/index", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					// Another program's change: the directory's time moves.
					if err := os.Chtimes(dir, time.Time{}, time.Now()); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Owned(ctx, newCtr); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
