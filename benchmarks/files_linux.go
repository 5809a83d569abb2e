package benchmarks

import (
	"net/netip"
	"path/filepath"

	"github.com/ipamkit/ipam/store/filestore"
)

func diskPeers() []Peer { return []Peer{OursFile(), HostLocalDisk()} }

// OursFile is this library's Allocator over its filestore, host-local's
// on-disk format, in dir, without fsync (host-local does not fsync either).
// Its Pair opens the directory twice, as two plugin processes do, each Store
// under its own Allocator.
func OursFile() Peer {
	return Peer{
		Name:  "ipam-file",
		Files: true,
		New: func(dir string, pool netip.Prefix) (Allocator, error) {
			return newOursFile(dir, pool)
		},
		Pair: func(dir string, pool netip.Prefix) (Allocator, Allocator, error) {
			a, err := newOursFile(dir, pool)
			if err != nil {
				return nil, nil, err
			}
			b, err := newOursFile(dir, pool)
			if err != nil {
				a.Close()
				return nil, nil, err
			}
			return a, b, nil
		},
	}
}

func newOursFile(dir string, pool netip.Prefix) (*ours, error) {
	st, err := filestore.Open(filepath.Join(dir, HostLocalNetwork), filestore.Options{
		Pools: []filestore.Pool{{Name: poolName, Index: 0, Prefixes: []netip.Prefix{pool.Masked()}}},
	})
	if err != nil {
		return nil, err
	}
	o, err := newOurs(pool, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	o.closer = st.Close
	return o, nil
}
