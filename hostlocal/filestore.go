package hostlocal

import (
	"path/filepath"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store/filestore"
)

// StateDir returns the directory host-local keeps the network's claims in:
// DataDir/Name.
func (c *Config) StateDir() string { return filepath.Join(c.DataDir, c.Name) }

// FileStorePools maps pools, host-local's range sets in order (a Config's
// Pools), onto host-local's state directory for store/filestore: pool i is
// range set i, whose cursor is the file last_reserved_ip.i, and its addresses
// are the prefixes covering its ranges (start to end), disjoint across pools
// as the ranges are. Open the store with them to read and write what
// host-local reads and writes:
//
//	c, err := hostlocal.Load(netconf, os.Getenv("CNI_ARGS"))
//	pools, err := hostlocal.FileStorePools(c.Pools)
//	st, err := filestore.Open(c.StateDir(), filestore.Options{Pools: pools})
//	cat, err := ipam.NewCatalog(c.Pools...)
//	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
//
// A filestore keeps host-local's identity: claims are owned by container ID
// and interface (store.Owner{ContainerID, Interface}), not by pod UID.
func FileStorePools(pools []*ipam.Pool) ([]filestore.Pool, error) {
	out := make([]filestore.Pool, len(pools))
	for i, p := range pools {
		rs, err := p.RangeSet()
		if err != nil {
			return nil, err
		}
		var b netipx.IPSetBuilder
		for _, r := range rs {
			b.AddRange(r.IPRange())
		}
		set, err := b.IPSet()
		if err != nil {
			return nil, err
		}
		out[i] = filestore.Pool{Name: p.Name, Index: i, Prefixes: set.Prefixes()}
	}
	return out, nil
}
