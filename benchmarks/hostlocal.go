package benchmarks

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	fakestore "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/testing"
)

// HostLocalNetwork is the network name, the directory under dir that the
// peers with Files keep their files in.
const HostLocalNetwork = "bench"

// HostLocalMem is CNI host-local's allocator over its in-memory test store
// (backend/testing.FakeStore), which keeps a map from address to container.
// The store's Lock does nothing, so its Pair puts the store behind a mutex,
// standing in for the file lock the disk store takes.
func HostLocalMem() Peer {
	return Peer{
		Name: "hostlocal-mem",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return newHostLocal(pool, fakestore.NewFakeStore(map[string]string{}, map[string]net.IP{}))
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			st := &lockedStore{FakeStore: fakestore.NewFakeStore(map[string]string{}, map[string]net.IP{})}
			a, err := newHostLocal(pool, st)
			if err != nil {
				return nil, nil, err
			}
			b, err := newHostLocal(pool, st)
			return a, b, err
		},
	}
}

// HostLocalIndexed is CNI host-local's allocator over an in-memory store
// written here (indexedStore) that keeps, besides the address map, an index
// from owner to addresses, so that the allocator's duplicate check (GetByID)
// and release (ReleaseByID) cost one map lookup instead of the FakeStore's
// scan of every address. It is host-local's algorithm at its best: the
// round-robin iterator probing from last_reserved_ip, one Reserve per
// candidate, with no store cost that grows with the pool. Its Pair is one
// store shared by two allocators, its Lock a mutex.
func HostLocalIndexed() Peer {
	return Peer{
		Name: "hostlocal-index",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return newHostLocal(pool, newIndexedStore())
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			st := newIndexedStore()
			a, err := newHostLocal(pool, st)
			if err != nil {
				return nil, nil, err
			}
			b, err := newHostLocal(pool, st)
			return a, b, err
		},
	}
}

// HostLocalDisk is CNI host-local's allocator over its disk store: one file
// per address in dir, a last_reserved_ip file, and a file lock, exactly as
// the plugin keeps /var/lib/cni/networks/<network>. Its Pair opens the
// directory twice, as two plugin processes do.
func HostLocalDisk() Peer {
	return Peer{
		Name:  "hostlocal-disk",
		Files: true,
		New: func(dir string, pool netip.Prefix) (Allocator, error) {
			st, err := disk.New(HostLocalNetwork, dir)
			if err != nil {
				return nil, err
			}
			return newHostLocal(pool, st)
		},
		Pair: func(dir string, pool netip.Prefix) (Allocator, Allocator, error) {
			s1, err := disk.New(HostLocalNetwork, dir)
			if err != nil {
				return nil, nil, err
			}
			s2, err := disk.New(HostLocalNetwork, dir)
			if err != nil {
				s1.Close()
				return nil, nil, err
			}
			a, err := newHostLocal(pool, s1)
			if err != nil {
				return nil, nil, err
			}
			b, err := newHostLocal(pool, s2)
			return a, b, err
		},
	}
}

type hostLocal struct {
	alloc *allocator.IPAllocator
	store backend.Store
	seq   int
}

func newHostLocal(pool netip.Prefix, st backend.Store) (*hostLocal, error) {
	ipn := net.IPNet{IP: toNetIP(pool.Masked().Addr()), Mask: net.CIDRMask(pool.Bits(), pool.Addr().BitLen())}
	rs := allocator.RangeSet{allocator.Range{Subnet: types.IPNet(ipn)}}
	if err := rs.Canonicalize(); err != nil {
		return nil, err
	}
	// The range starts at the first host, which is also the gateway and so
	// skipped: the usable addresses are those of Usable.
	return &hostLocal{alloc: allocator.NewIPAllocator(&rs, st, 0), store: st}, nil
}

func (h *hostLocal) Allocate(k int) (netip.Addr, error) {
	cfg, err := h.alloc.Get(containerIDs[k], "eth0", nil)
	if err != nil {
		return netip.Addr{}, err
	}
	return fromNetIP(cfg.Address.IP), nil
}

func (h *hostLocal) Release(k int) error {
	return h.alloc.Release(containerIDs[k], "eth0")
}

// Claim reserves each address in the store, as Get does for a requested
// address once it has taken the store's lock, which also moves the
// round-robin cursor (last_reserved_ip) to it.
func (h *hostLocal) Claim(ips []netip.Addr) error {
	if err := h.store.Lock(); err != nil {
		return err
	}
	defer h.store.Unlock()
	for _, ip := range ips {
		h.seq++
		if _, err := h.store.Reserve(fillOwner(h.seq), "eth0", toNetIP(ip), "0"); err != nil {
			return err
		}
	}
	return nil
}

func (h *hostLocal) Close() error { return h.store.Close() }

// lockedStore gives the FakeStore the lock host-local expects of a store.
type lockedStore struct {
	mu sync.Mutex
	*fakestore.FakeStore
}

func (s *lockedStore) Lock() error   { s.mu.Lock(); return nil }
func (s *lockedStore) Unlock() error { s.mu.Unlock(); return nil }

// indexedStore is host-local's backend.Store in memory, indexed both ways:
// address to owner, and owner (container ID and interface) to the addresses
// it holds, so that every method but Lock costs a map operation or two. Its
// lock is a mutex, which the allocator takes around each Get and Release.
type indexedStore struct {
	mu      sync.Mutex
	byIP    map[netip.Addr]hostLocalOwner
	byOwner map[hostLocalOwner][]net.IP
	last    map[string]net.IP // by range ID
}

// hostLocalOwner is what host-local writes in an address file.
type hostLocalOwner struct{ id, ifname string }

var _ backend.Store = (*indexedStore)(nil)

func newIndexedStore() *indexedStore {
	return &indexedStore{byIP: map[netip.Addr]hostLocalOwner{}, byOwner: map[hostLocalOwner][]net.IP{}, last: map[string]net.IP{}}
}

func (s *indexedStore) Lock() error   { s.mu.Lock(); return nil }
func (s *indexedStore) Unlock() error { s.mu.Unlock(); return nil }
func (s *indexedStore) Close() error  { return nil }

// Reserve records ip for the owner unless it is held, and moves the range's
// cursor to it, as the disk store does.
func (s *indexedStore) Reserve(id, ifname string, ip net.IP, rangeID string) (bool, error) {
	a := fromNetIP(ip)
	if _, held := s.byIP[a]; held {
		return false, nil
	}
	o := hostLocalOwner{id, ifname}
	s.byIP[a] = o
	s.byOwner[o] = append(s.byOwner[o], ip)
	s.last[rangeID] = ip
	return true, nil
}

func (s *indexedStore) LastReservedIP(rangeID string) (net.IP, error) {
	ip, ok := s.last[rangeID]
	if !ok {
		return nil, os.ErrNotExist
	}
	return ip, nil
}

// ReleaseByID frees what the owner holds. (The disk store also falls back
// to files holding the bare container ID, written by host-local before
// 2018; an indexed store has none.)
func (s *indexedStore) ReleaseByID(id, ifname string) error {
	o := hostLocalOwner{id, ifname}
	for _, ip := range s.byOwner[o] {
		delete(s.byIP, fromNetIP(ip))
	}
	delete(s.byOwner, o)
	return nil
}

// GetByID returns the addresses the owner holds; the caller only reads them.
func (s *indexedStore) GetByID(id, ifname string) []net.IP {
	return slices.Clip(s.byOwner[hostLocalOwner{id, ifname}])
}

// WriteHostLocalDir writes the claims of ips, in order, into dir/bench as
// host-local's disk store writes them (a file per address holding
// "<container ID>\r\n<ifname>"), and its cursor file naming the last. It
// writes each file once, where the store's Reserve also rewrites the cursor
// file for each: it is how a workload pre-fills a large pool for the peers
// with Files.
func WriteHostLocalDir(dir string, ips []netip.Addr) error {
	st, err := disk.New(HostLocalNetwork, dir)
	if err != nil {
		return err
	}
	defer st.Close()
	netDir := filepath.Join(dir, HostLocalNetwork)
	for i, ip := range ips {
		if i == len(ips)-1 {
			_, err = st.Reserve(fillOwner(i+1), "eth0", toNetIP(ip), "0")
		} else {
			err = writeNew(disk.GetEscapedPath(netDir, ip.String()), fillOwner(i+1)+disk.LineBreak+"eth0")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func writeNew(name, content string) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_EXCL|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
