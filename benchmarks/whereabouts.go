package benchmarks

import (
	"errors"
	"net/netip"
	"slices"
	"sync"

	"github.com/k8snetworkplumbingwg/whereabouts/pkg/allocate"
	"github.com/k8snetworkplumbingwg/whereabouts/pkg/logging"
	wbtypes "github.com/k8snetworkplumbingwg/whereabouts/pkg/types"
)

// Whereabouts is Whereabouts' allocation function, allocate.AssignIP (and
// DeallocateIP), over an in-memory reservation list: the part of Whereabouts
// that runs in the plugin process, without the read and the update of its
// IPPool object through the Kubernetes API that surround every call in a
// cluster. It is therefore a lower bound of Whereabouts' cost.
//
// Its Pair stands in for that IPPool: each attempt copies the list (the read),
// runs AssignIP on the copy, and writes the result back only if nobody wrote
// since the read (the update with resourceVersion), else tries again, up to
// Whereabouts' 100 attempts (storage.DatastoreRetries).
func Whereabouts() Peer {
	return Peer{
		Name: "whereabouts",
		New: func(_ string, pool netip.Prefix) (Allocator, error) {
			return &whereabouts{conf: wbRange(pool)}, nil
		},
		Pair: func(_ string, pool netip.Prefix) (Allocator, Allocator, error) {
			shared := &wbPool{}
			conf := wbRange(pool)
			return &wbClient{conf: conf, pool: shared}, &wbClient{conf: conf, pool: shared}, nil
		},
	}
}

func init() {
	// Whereabouts logs at debug level to stderr unless configured otherwise;
	// a deployment sets a level. Keep its errors, written nowhere: AssignIP
	// still formats its debug arguments, as it does in a deployment.
	logging.SetLogLevel("error")
	logging.SetLogStderr(false)
}

// wbRange is the range configuration for pool. Whereabouts hands out every
// host of the subnet; starting the range at the second host leaves out
// host-local's gateway, so it serves the addresses of Usable.
func wbRange(pool netip.Prefix) wbtypes.RangeConfiguration {
	first, _ := Usable(pool)
	return wbtypes.RangeConfiguration{Range: pool.Masked().String(), RangeStart: toNetIP(first)}
}

type whereabouts struct {
	conf wbtypes.RangeConfiguration
	list []wbtypes.IPReservation
	seq  int
}

func (w *whereabouts) Allocate(k int) (netip.Addr, error) {
	ipn, list, err := allocate.AssignIP(w.conf, w.list, containerIDs[k], podRefs[k], "eth0")
	if err != nil {
		return netip.Addr{}, err
	}
	w.list = list
	return fromNetIP(ipn.IP), nil
}

func (w *whereabouts) Release(k int) error {
	list, ip := allocate.DeallocateIP(w.list, containerIDs[k], "eth0")
	if ip == nil {
		return errNotHeld
	}
	w.list = list
	return nil
}

func (w *whereabouts) Claim(ips []netip.Addr) error {
	w.list = appendReservations(w.list, &w.seq, ips)
	return nil
}

func (w *whereabouts) Close() error { return nil }

func appendReservations(list []wbtypes.IPReservation, seq *int, ips []netip.Addr) []wbtypes.IPReservation {
	for _, ip := range ips {
		*seq++
		id := fillOwner(*seq)
		list = append(list, wbtypes.IPReservation{IP: toNetIP(ip), ContainerID: id, PodRef: "default/" + id, IfName: "eth0"})
	}
	return list
}

// wbPool stands in for an IPPool object: its allocations and a version that
// every write bumps.
type wbPool struct {
	mu      sync.Mutex
	version int
	list    []wbtypes.IPReservation
	seq     int
}

func (p *wbPool) read() ([]wbtypes.IPReservation, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.list), p.version
}

// write stores list if the pool is still at version, and reports whether it did.
func (p *wbPool) write(list []wbtypes.IPReservation, version int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.version != version {
		return false
	}
	p.list = list
	p.version++
	return true
}

// wbAttempts is Whereabouts' storage.DatastoreRetries.
const wbAttempts = 100

var errWBConflict = errors.New("whereabouts: pool changed on every attempt")

type wbClient struct {
	conf wbtypes.RangeConfiguration
	pool *wbPool
}

func (c *wbClient) Allocate(k int) (netip.Addr, error) {
	for range wbAttempts {
		list, v := c.pool.read()
		ipn, list, err := allocate.AssignIP(c.conf, list, containerIDs[k], podRefs[k], "eth0")
		if err != nil {
			return netip.Addr{}, err
		}
		if c.pool.write(list, v) {
			return fromNetIP(ipn.IP), nil
		}
	}
	return netip.Addr{}, errWBConflict
}

func (c *wbClient) Release(k int) error {
	for range wbAttempts {
		list, v := c.pool.read()
		list, ip := allocate.DeallocateIP(list, containerIDs[k], "eth0")
		if ip == nil {
			return errNotHeld
		}
		if c.pool.write(list, v) {
			return nil
		}
	}
	return errWBConflict
}

func (c *wbClient) Claim(ips []netip.Addr) error {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	c.pool.list = appendReservations(c.pool.list, &c.pool.seq, ips)
	c.pool.version++
	return nil
}

func (c *wbClient) Close() error { return nil }
