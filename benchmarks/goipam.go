package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"

	goipam "github.com/metal-stack/go-ipam"
)

// GoIPAM is metal-stack/go-ipam with its in-memory storage. go-ipam records
// no owners, so the adapter keeps which address each owner got. Its Pair is
// two Ipamers on one storage, as two processes on one database; go-ipam
// retries a write that lost a race (its optimistic lock) with a back-off.
func GoIPAM() Peer {
	return Peer{
		Name: "goipam",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return newGoIPAM(pool, goipam.NewMemory(context.Background()))
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			st := goipam.NewMemory(context.Background())
			a, err := newGoIPAM(pool, st)
			if err != nil {
				return nil, nil, err
			}
			b := &goIPAM{ipamer: goipam.NewWithStorage(st), storage: st, cidr: a.cidr, shared: a.shared, held: map[int]netip.Addr{}}
			return a, b, nil
		},
	}
}

// goIPAMNamespace is go-ipam's default namespace, the one its calls without a
// namespace in their context use.
const goIPAMNamespace = "root"

type goIPAM struct {
	ipamer  goipam.Ipamer
	storage goipam.Storage
	cidr    string
	held    map[int]netip.Addr
	shared  *sync.Mutex // serialises Claim, which replaces the stored prefix
}

func newGoIPAM(pool netip.Prefix, st goipam.Storage) (*goIPAM, error) {
	g := &goIPAM{ipamer: goipam.NewWithStorage(st), storage: st, cidr: pool.Masked().String(),
		held: map[int]netip.Addr{}, shared: new(sync.Mutex)}
	if _, err := g.ipamer.NewPrefix(context.Background(), g.cidr); err != nil {
		return nil, err
	}
	// go-ipam reserves the network (and IPv4 broadcast) address itself; the
	// first host, host-local's gateway, is taken here so that it serves the
	// addresses of Usable.
	first, _ := Usable(pool)
	if err := g.Claim([]netip.Addr{first.Prev()}); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *goIPAM) Allocate(k int) (netip.Addr, error) {
	ip, err := g.ipamer.AcquireIP(context.Background(), g.cidr)
	if err != nil {
		return netip.Addr{}, err
	}
	g.held[k] = ip.IP
	return ip.IP, nil
}

func (g *goIPAM) Release(k int) error {
	ip, ok := g.held[k]
	if !ok {
		return errNotHeld
	}
	delete(g.held, k)
	return g.ipamer.ReleaseIPFromPrefix(context.Background(), g.cidr, ip.String())
}

// Claim adds the addresses to the stored prefix in one write: it dumps the
// prefix (go-ipam's own JSON), adds them to its set of used addresses, and
// loads the result in place of the old prefix. Adding
// them one by one with AcquireSpecificIP would copy the whole set for each.
func (g *goIPAM) Claim(ips []netip.Addr) error {
	g.shared.Lock()
	defer g.shared.Unlock()
	ctx := context.Background()
	dump, err := g.ipamer.Dump(ctx)
	if err != nil {
		return err
	}
	var prefixes []map[string]any
	if err := json.Unmarshal([]byte(dump), &prefixes); err != nil {
		return err
	}
	if len(prefixes) != 1 {
		return fmt.Errorf("goipam: %d prefixes in dump", len(prefixes))
	}
	used, _ := prefixes[0]["IPs"].(map[string]any)
	if used == nil {
		used = map[string]any{}
	}
	for _, ip := range ips {
		used[ip.String()] = true
	}
	prefixes[0]["IPs"] = used
	out, err := json.Marshal(prefixes)
	if err != nil {
		return err
	}
	// Load refuses to replace existing prefixes: empty the storage first.
	if err := g.storage.DeleteAllPrefixes(ctx, goIPAMNamespace); err != nil {
		return err
	}
	return g.ipamer.Load(ctx, string(out))
}

func (g *goIPAM) Close() error { return nil }
