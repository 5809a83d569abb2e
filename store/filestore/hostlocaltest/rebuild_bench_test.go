//go:build linux

package hostlocaltest

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

var rebuildClaims = flag.String("rebuild-claims", "4000",
	"BenchmarkStaleIndex: comma-separated numbers of claim files in the directory (the figures: 4000,60000)")

// BenchmarkStaleIndex measures what a stale owner index costs, next to what
// host-local pays on every call, in a directory of n claim files written as
// host-local writes them (each its own container's):
//
//   - host-local/walk: host-local v1.9.1's disk store finding a new
//     container's addresses (GetByID, under its lock): the walk of every file
//     that each of its ADDs makes per range set, and each DEL once or twice;
//   - filestore/rebuild: Owned of a new container after another program
//     changed the directory, which makes the index rebuild;
//   - filestore/owned: the same Owned with the index up to date.
func BenchmarkStaleIndex(b *testing.B) {
	for f := range strings.SplitSeq(*rebuildClaims, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoErrorf(b, err, "-rebuild-claims %q", *rebuildClaims)
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			dataDir := b.TempDir()
			dir := filepath.Join(dataDir, network)
			require.NoError(b, os.Mkdir(dir, 0o755))
			for i := range n {
				ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
				require.NoError(b, os.WriteFile(filepath.Join(dir, ip.String()), fmt.Appendf(nil, "ctr%d\r\neth0", i), 0o600))
			}
			hl, err := disk.New(network, dataDir)
			require.NoError(b, err)
			defer hl.Close()
			s, err := filestore.Open(dir, filestore.Options{Pools: pools})
			require.NoError(b, err)
			defer s.Close()
			ctx := context.Background()
			q := store.ByContainer("0123456789abcdef").On("eth0")

			b.Run("host-local/walk", func(b *testing.B) {
				for b.Loop() {
					require.NoError(b, hl.Lock())
					ips := hl.GetByID("0123456789abcdef", "eth0")
					require.NoError(b, hl.Unlock())
					require.Empty(b, ips)
				}
			})
			b.Run("filestore/rebuild", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					require.NoError(b, os.Chtimes(dir, time.Time{}, time.Now()))
					cs, err := s.Owned(ctx, q)
					require.NoError(b, err)
					require.Empty(b, cs)
				}
			})
			b.Run("filestore/owned", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					cs, err := s.Owned(ctx, q)
					require.NoError(b, err)
					require.Empty(b, cs)
				}
			})
		})
	}
}
