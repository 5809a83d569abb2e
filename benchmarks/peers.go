package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// MaxOwners bounds the owner numbers a workload may pass to Allocate.
const MaxOwners = 1 << 14

// Allocator is one allocator under test, set up over one pool.
type Allocator interface {
	// Allocate gives owner k (0 <= k < MaxOwners) one address of the pool.
	Allocate(k int) (netip.Addr, error)
	// Release frees the address owner k holds.
	Release(k int) error
	// Claim marks each of ips as held, for owners of its own that Allocate
	// never names, leaving the allocator as if it had handed them out one by
	// one in that order. It is how a workload fills a pool outside the timer,
	// through the cheapest path the peer has (its store's own write, or a
	// request for that very address).
	Claim(ips []netip.Addr) error
	// Close frees what the allocator holds open.
	Close() error
}

// Peer makes allocators of one kind.
type Peer struct {
	// Name names the peer in benchmark names and in the report.
	Name string
	// New returns an allocator over the usable addresses of pool (see Usable).
	// dir is a directory it may keep files in: empty, so that none of the
	// addresses is held, or, for a peer with Files, already holding claims.
	New func(dir string, pool netip.Prefix) (Allocator, error)
	// Pair returns two allocators over one empty pool that two goroutines may
	// use at once, sharing the pool as the peer shares it between the
	// processes or goroutines of a node. Nil if the peer has no shared form.
	Pair func(dir string, pool netip.Prefix) (Allocator, Allocator, error)
	// Files reports that the peer keeps its claims in dir/bench in
	// host-local's on-disk format, so that New over a directory already
	// holding such files serves them.
	Files bool
}

// Peers returns every peer that runs in memory, this library first.
func Peers() []Peer {
	return []Peer{Ours(), Bitmap(), HostLocalMem(), HostLocalIndexed(), Whereabouts(), GoIPAM()}
}

// DiskPeers returns the peers that keep their claims in files: on Linux this
// library's filestore, then host-local's disk store; elsewhere the latter only
// (the filestore is for Linux).
func DiskPeers() []Peer { return diskPeers() }

// Usable returns the first and last address every allocator hands out from
// pool: the subnet without its network address and its first host (host-local's
// default gateway) and, for IPv4, without its broadcast address.
func Usable(pool netip.Prefix) (first, last netip.Addr) {
	pool = pool.Masked()
	first = pool.Addr().Next().Next()
	last = lastAddr(pool)
	if pool.Addr().Is4() {
		last = last.Prev()
	}
	return first, last
}

// UsableCount returns how many addresses Usable spans, capped at 1<<30.
func UsableCount(pool netip.Prefix) int {
	first, _ := Usable(pool)
	hostBits := pool.Addr().BitLen() - pool.Bits()
	if hostBits >= 30 {
		return 1 << 30
	}
	n := 1<<hostBits - 2
	if first.Is4() {
		n--
	}
	return n
}

func lastAddr(pool netip.Prefix) netip.Addr {
	b := pool.Masked().Addr().AsSlice()
	for i := range b {
		netBits := pool.Bits() - i*8 // bits of this byte in the prefix, if under 8
		switch {
		case netBits <= 0:
			b[i] = 0xff
		case netBits < 8:
			b[i] |= 0xff >> netBits
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Nth returns the address n after a.
func Nth(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	carry := n
	for i := 15; i >= 0 && carry > 0; i-- {
		s := uint64(b[i]) + carry&0xff
		b[i] = byte(s)
		carry = carry>>8 + s>>8
	}
	r := netip.AddrFrom16(b)
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

// Offset returns how far a lies after base, and false if it lies before base
// or 1<<62 or more after it.
func Offset(base, a netip.Addr) (uint64, bool) {
	if base.Is4() != a.Is4() || a.Less(base) {
		return 0, false
	}
	x, y := base.As16(), a.As16()
	for i := range 8 {
		if x[i] != y[i] {
			return 0, false
		}
	}
	var d uint64
	borrow := 0
	for i := 15; i >= 8; i-- {
		v := int(y[i]) - int(x[i]) - borrow
		borrow = 0
		if v < 0 {
			v += 256
			borrow = 1
		}
		d |= uint64(v) << (8 * (15 - i))
	}
	if d >= 1<<62 {
		return 0, false
	}
	return d, true
}

// Owner names, built once so that no workload times their formatting.
var (
	containerIDs = make([]string, MaxOwners)
	podRefs      = make([]string, MaxOwners)
)

func init() {
	for k := range MaxOwners {
		containerIDs[k] = fmt.Sprintf("c%05d", k)
		podRefs[k] = fmt.Sprintf("default/pod-%05d", k)
	}
}

// fillOwner is the owner Claim records its i-th address for; it never
// collides with an owner of Allocate.
func fillOwner(seq int) string { return "f" + strconv.Itoa(seq) }

// errNotHeld is returned by Release for an owner that holds nothing.
var errNotHeld = errors.New("owner holds no address")

func toNetIP(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

func fromNetIP(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// ---- this library ----

const poolName = "p"

// Ours is this library's Allocator with its default in-memory store. Its
// Pair is one Allocator shared by both goroutines, as a node daemon shares it.
func Ours() Peer {
	return Peer{
		Name: "ipam",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return newOurs(pool, nil)
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			a, err := newOurs(pool, nil)
			return a, a, err
		},
	}
}

// OursTwoAllocators is this library with two Allocators on one in-memory
// store, as two processes on one store: its Pair is what differs from Ours,
// the Store deciding every race between the two indexes.
func OursTwoAllocators() Peer {
	p := Ours()
	p.Name = "ipam-2alloc"
	p.Pair = func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
		st := memstore.New()
		a, err := newOurs(pool, st)
		if err != nil {
			return nil, nil, err
		}
		b, err := newOurs(pool, st.Open())
		return a, b, err
	}
	return p
}

type ours struct {
	alloc  *ipam.Allocator
	ifaces []ipam.NIC // one request's interfaces, shared: requests are read only
	seq    int
	closer func() error
}

func newOurs(pool netip.Prefix, st store.Store) (*ours, error) {
	cat, err := ipam.NewCatalog(&ipam.Pool{Name: poolName, Ranges: []ipam.Range{{Subnet: pool}}})
	if err != nil {
		return nil, err
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		return nil, err
	}
	return &ours{alloc: a, ifaces: []ipam.NIC{{Name: "eth0", Pools: []string{poolName}}}}, nil
}

func (o *ours) Allocate(k int) (netip.Addr, error) {
	res, err := o.alloc.Allocate(context.Background(), ipam.Request{ContainerID: containerIDs[k], Interfaces: o.ifaces})
	if err != nil {
		return netip.Addr{}, err
	}
	return res.IPs[0].Address.Addr(), nil
}

func (o *ours) Release(k int) error {
	return o.alloc.Release(context.Background(), store.Owner{ContainerID: containerIDs[k], Interface: "eth0"})
}

func (o *ours) Claim(ips []netip.Addr) error {
	ctx := context.Background()
	for _, ip := range ips {
		o.seq++
		req := ipam.Request{ContainerID: fillOwner(o.seq),
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{poolName}, IPs: []netip.Addr{ip}}}}
		if _, err := o.alloc.Allocate(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// Warm builds the Allocator's index from its Store, which it otherwise does
// on first use: over a directory filled beforehand, that first use would
// read every file inside the timer.
func (o *ours) Warm() error {
	_, err := o.alloc.Lookup(context.Background(), store.Owner{ContainerID: "warm-up", Interface: "eth0"})
	return err
}

func (o *ours) Close() error {
	if o.closer != nil {
		return o.closer()
	}
	return nil
}

// ---- the floor ----

// Bitmap is a plain bitmap: one bit per address, a round-robin cursor, a
// word-at-a-time search for the next zero bit, and a slice from owner to
// address. It keeps nothing else, so it is the floor no allocator can go below.
// Its Pair is one bitmap behind a mutex.
func Bitmap() Peer {
	return Peer{
		Name: "bitmap",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return newBitmap(pool), nil
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			l := &lockedBitmap{b: newBitmap(pool)}
			return l, l, nil
		},
	}
}

// bitmapLimit caps the addresses a bitmap covers (it grows on demand up to
// there), so that an IPv6 /64 costs only what is used.
const bitmapLimit = 1 << 26

type bitmap struct {
	base   netip.Addr // first usable address; bit i is base+i
	n      uint64     // usable addresses covered
	words  []uint64
	cursor uint64   // the bit after the last one set
	owners []uint64 // by owner: the bit it holds, if held
	held   []bool
}

func newBitmap(pool netip.Prefix) *bitmap {
	first, _ := Usable(pool)
	n := uint64(UsableCount(pool))
	if n > bitmapLimit {
		n = bitmapLimit
	}
	words := (n + 63) / 64
	if words > 1024 && !first.Is4() {
		words = 1024 // IPv6: grow as the fill reaches further
	}
	owners := min(n, MaxOwners)
	return &bitmap{base: first, n: n, words: make([]uint64, words),
		owners: make([]uint64, owners), held: make([]bool, owners)}
}

func (m *bitmap) Allocate(k int) (netip.Addr, error) {
	i, ok := m.next()
	if !ok {
		return netip.Addr{}, errors.New("bitmap: exhausted")
	}
	m.set(i)
	m.cursor = i + 1
	if k >= len(m.owners) {
		n := max(k+1, 2*len(m.owners))
		m.owners = append(m.owners, make([]uint64, n-len(m.owners))...)
		m.held = append(m.held, make([]bool, n-len(m.held))...)
	}
	m.owners[k], m.held[k] = i, true
	return Nth(m.base, i), nil
}

// next returns the first clear bit at or after the cursor, wrapping once.
func (m *bitmap) next() (uint64, bool) {
	start := m.cursor
	if start >= m.n {
		start = 0
	}
	if i, ok := m.scan(start, m.n); ok {
		return i, true
	}
	return m.scan(0, start)
}

func (m *bitmap) scan(from, to uint64) (uint64, bool) {
	for w := from / 64; w*64 < to; w++ {
		if w >= uint64(len(m.words)) {
			return w * 64, w*64 < to // beyond the grown part: all clear
		}
		free := ^m.words[w]
		if w == from/64 {
			free &= ^uint64(0) << (from % 64)
		}
		if free != 0 {
			i := w*64 + uint64(bits.TrailingZeros64(free))
			return i, i < to
		}
	}
	return 0, false
}

func (m *bitmap) set(i uint64) {
	for i/64 >= uint64(len(m.words)) {
		m.words = append(m.words, make([]uint64, len(m.words))...)
	}
	m.words[i/64] |= 1 << (i % 64)
}

func (m *bitmap) Release(k int) error {
	if k >= len(m.held) || !m.held[k] {
		return errNotHeld
	}
	i := m.owners[k]
	m.words[i/64] &^= 1 << (i % 64)
	m.held[k] = false
	return nil
}

func (m *bitmap) Claim(ips []netip.Addr) error {
	for _, ip := range ips {
		i, ok := Offset(m.base, ip)
		if !ok || i >= m.n {
			return fmt.Errorf("bitmap: %s out of range", ip)
		}
		m.set(i)
		m.cursor = i + 1
	}
	return nil
}

func (m *bitmap) Close() error { return nil }

// lockedBitmap is a bitmap behind a mutex, for two goroutines.
type lockedBitmap struct {
	mu sync.Mutex
	b  *bitmap
}

func (l *lockedBitmap) Allocate(k int) (netip.Addr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Allocate(k)
}

func (l *lockedBitmap) Release(k int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Release(k)
}

func (l *lockedBitmap) Claim(ips []netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Claim(ips)
}

func (l *lockedBitmap) Close() error { return nil }
