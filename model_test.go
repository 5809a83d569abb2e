package ipam_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

var (
	modelSeed = flag.Uint64("model.seed", 0, "seed for TestModel; 0 picks one from the clock")
	modelSeq  = flag.Int("model.seq", -1, "run only this sequence of TestModel (with -model.seed)")
	modelLong = flag.Bool("model.long", false, "run TestModel with many more and longer sequences")
)

// TestModel runs random sequences of Allocate, Release, ReleaseIP and restarts
// against the Allocator and against modelAlloc, a naive reference written with
// slices and linear scans, over three tiny pools, and compares after every
// operation: success or the sentinel errors, the addresses returned in order
// with their Reused flags, every owner's Lookup and every pool's claims in the
// Store. A divergence prints the seed, the operation and both states, and a
// shortened sequence that still diverges. Replay with
// -run TestModel -model.seed=N (and -model.seq=I for one sequence).
func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -run TestModel -model.seed=%d)", seed, seed)
	seqs, ops := 67, 200 // per mode: about 200 sequences in all
	if *modelLong {
		seqs, ops = 2000, 1000
	}
	defs := parseModelPools(t)
	// The checks after every operation allocate; collect less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))

	modes := []struct {
		name  string
		strat func(rng *rand.Rand) ipam.Strategy
	}{
		{"round-robin", func(*rand.Rand) ipam.Strategy { return ipam.RoundRobin }},
		{"lowest-free", func(*rand.Rand) ipam.Strategy { return ipam.LowestFree }},
		{"mixed", func(rng *rand.Rand) ipam.Strategy { return ipam.Strategy(rng.IntN(2)) }},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			var st modelStats
			for seq := range seqs {
				if *modelSeq >= 0 && seq != *modelSeq {
					continue
				}
				rng := rand.New(rand.NewPCG(seed, uint64(seq)))
				var cfg modelConfig
				for range defs {
					cfg.strategies = append(cfg.strategies, mode.strat(rng))
				}
				rng.IntN(2) // was the resync choice: keeps the seeds' sequences as they were
				run := newModelRun(defs, cfg)
				var done []modelOp
				for i := range ops {
					op := genModelOp(rng, run.m)
					done = append(done, op)
					if diff := run.step(op, &st); diff != "" {
						t.Errorf("model divergence: seed %d, sequence %d, op %d (config %s)\n"+
							"replay with -run 'TestModel/%s' -model.seed=%d -model.seq=%d\n\n"+
							"op: %s\n%s\nmodel before the op:\n%s\nmodel after:\n%s\nallocator and store after:\n%s\n"+
							"last ops of the sequence:\n%s\nshortened sequence that still diverges:\n%s",
							seed, seq, i, cfg, mode.name, seed, seq, op, diff, modelAfter(defs, cfg, done[:i]), run.m, run.realState(),
							formatModelOps(done[max(0, len(done)-15):], max(0, len(done)-15)), shrinkModelOps(defs, cfg, done))
						return
					}
				}
			}
			t.Logf("%s", st)
			// Guard the generator against drifting into trivial sequences.
			if *modelSeq < 0 {
				require.Greater(t, st.allocOK, st.ops/10, "too few successful allocations")
				require.Greater(t, st.exhausted, st.ops/100, "too few exhausted pools")
				require.Greater(t, st.reused, st.ops/100, "too few reused addresses")
				require.Greater(t, st.requested, st.ops/100, "too few requested addresses granted")
				require.Greater(t, st.errs, st.ops/50, "too few failed requests")
				require.Greater(t, st.rolledBack, st.ops/200, "too few rollbacks")
			}
		})
	}
}

// modelStats counts what the sequences did, to show that they test something.
type modelStats struct {
	ops, allocOK, exhausted, reused, requested, errs, rolledBack int
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d ops: %d allocations granted (%d addresses reused, %d requested), %d failed (%d exhausted, %d after claiming some addresses)",
		s.ops, s.allocOK, s.reused, s.requested, s.errs, s.exhausted, s.rolledBack)
}

// A modelPoolDef is one pool written twice: as JSON for the library and as the
// canonical ranges and excluded addresses the reference works from.
type modelPoolDef struct {
	name    string
	json    string
	ranges  []modelRange
	exclude []string
	pool    *ipam.Pool // parsed from json
}

// modelRange is one canonical range: host-local's defaults filled in by hand.
type modelRange struct {
	subnet              netip.Prefix
	start, end, gateway netip.Addr
}

func modelR(subnet, start, end, gw string) modelRange {
	return modelRange{netip.MustParsePrefix(subnet), netip.MustParseAddr(start), netip.MustParseAddr(end), netip.MustParseAddr(gw)}
}

// contains is host-local's Range.Contains: in the subnet and between start and
// end; the gateway and excluded addresses count.
func (r modelRange) contains(ip netip.Addr) bool {
	return r.subnet.Contains(ip) && r.start.Compare(ip) <= 0 && ip.Compare(r.end) <= 0
}

// modelPoolDefs: a host-local range set of three small ranges out of address
// order (one with its gateway outside start..end, one with it inside), an IPv6
// range set, and a SpiderIPPool with scattered ips and excludeIPs.
var modelPoolDefs = []modelPoolDef{
	{
		name: "hl",
		json: `{"name":"hl","ranges":[
			{"subnet":"10.0.1.0/29"},
			{"subnet":"10.0.0.0/30","rangeStart":"10.0.0.1","rangeEnd":"10.0.0.2","gateway":"10.0.0.3"},
			{"subnet":"10.0.0.16/28","rangeStart":"10.0.0.20","rangeEnd":"10.0.0.25","gateway":"10.0.0.22"}],
			"excludeIPs":["10.0.1.4"]}`,
		ranges: []modelRange{
			modelR("10.0.1.0/29", "10.0.1.1", "10.0.1.6", "10.0.1.1"),
			modelR("10.0.0.0/30", "10.0.0.1", "10.0.0.2", "10.0.0.3"),
			modelR("10.0.0.16/28", "10.0.0.20", "10.0.0.25", "10.0.0.22"),
		},
		exclude: []string{"10.0.1.4"},
	},
	{
		name: "v6",
		json: `{"name":"v6","ranges":[
			{"subnet":"fd00::/125"},
			{"subnet":"fd00:0:0:1::/126","rangeStart":"fd00:0:0:1::2"}],
			"excludeIPs":["fd00::5"]}`,
		ranges: []modelRange{
			modelR("fd00::/125", "fd00::1", "fd00::7", "fd00::1"),
			modelR("fd00:0:0:1::/126", "fd00:0:0:1::2", "fd00:0:0:1::3", "fd00:0:0:1::1"),
		},
		exclude: []string{"fd00::5"},
	},
	{
		name: "sp",
		json: `{"name":"sp","subnet":"172.16.0.0/24","gateway":"172.16.0.1",
			"ips":["172.16.0.10-172.16.0.15","172.16.0.20","172.16.0.1-172.16.0.3","172.16.0.30-172.16.0.31"],
			"excludeIPs":["172.16.0.1","172.16.0.12","172.16.0.31"]}`,
		ranges: []modelRange{
			modelR("172.16.0.0/24", "172.16.0.1", "172.16.0.3", "172.16.0.1"),
			modelR("172.16.0.0/24", "172.16.0.10", "172.16.0.15", "172.16.0.1"),
			modelR("172.16.0.0/24", "172.16.0.20", "172.16.0.20", "172.16.0.1"),
			modelR("172.16.0.0/24", "172.16.0.30", "172.16.0.31", "172.16.0.1"),
		},
		exclude: []string{"172.16.0.1", "172.16.0.12", "172.16.0.31"},
	},
}

// modelExtraProbes are addresses outside every pool, or inside a subnet but
// outside its ranges, that requests and cursors may name.
var modelExtraProbes = []string{"10.0.0.0", "10.0.1.7", "172.16.0.100", "192.168.0.1", "fd00::8", "2001:db8::1"}

func parseModelPools(t *testing.T) []modelPoolDef {
	defs := slices.Clone(modelPoolDefs)
	for i := range defs {
		p, err := ipam.ParsePool([]byte(defs[i].json))
		require.NoError(t, err, "pool %s", defs[i].name)
		defs[i].pool = p
	}
	return defs
}

const modelOwners = 8

var modelIfaces = []string{"eth0", "net1"}

// modelOwnerList holds the owners: the first five are pods, known by UID, the
// others host-local containers, known by container ID.
var modelOwnerList = func() []store.Owner {
	out := make([]store.Owner, modelOwners)
	for o := range out {
		if o < 5 {
			out[o] = store.Owner{Namespace: "ns", Name: fmt.Sprintf("pod-%d", o), UID: fmt.Sprintf("uid-%d", o)}
		} else {
			out[o] = store.Owner{ContainerID: fmt.Sprintf("ctr-%d", o)}
		}
	}
	return out
}()

func modelOwner(o int) store.Owner { return modelOwnerList[o] }

// modelOwnerIndex is the inverse of modelOwner, or -1.
func modelOwnerIndex(o store.Owner) int {
	for i, w := range modelOwnerList {
		if o.UID == w.UID && o.ContainerID == w.ContainerID && o.Namespace == w.Namespace && o.Name == w.Name {
			return i
		}
	}
	return -1
}

// modelConfig is what a sequence runs with besides its operations.
type modelConfig struct {
	strategies []ipam.Strategy // per pool, in modelPoolDefs order
}

func (c modelConfig) String() string {
	var b strings.Builder
	for i, s := range c.strategies {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", modelPoolDefs[i].name, s)
	}
	return b.String()
}

// ---- the reference ----

// modelAlloc is the reference allocator: every pool is a slice of its
// allocatable addresses in allocation order, every claim an entry of a slice.
type modelAlloc struct {
	pools []*modelPool
	holds []modelHold
}

type modelPool struct {
	name     string
	strategy ipam.Strategy
	ranges   []modelRange
	exclude  []netip.Addr
	order    []netip.Addr // allocatable addresses: ranges in order, each ascending
	rangeOf  []int        // index in ranges of order[i]
	cursor   netip.Addr   // last address reserved, or zero
}

// modelHold is one claim. It is comparable, so that slices of them compare
// with slices.Equal.
type modelHold struct {
	pool  string
	ip    netip.Addr
	owner int
	iface string
}

func (h modelHold) String() string {
	return fmt.Sprintf("%s %s owner %d %s", h.pool, h.ip, h.owner, h.iface)
}

func newModelAlloc(defs []modelPoolDef, strategies []ipam.Strategy) *modelAlloc {
	m := &modelAlloc{}
	for i, d := range defs {
		p := &modelPool{name: d.name, strategy: strategies[i], ranges: d.ranges}
		for _, s := range d.exclude {
			p.exclude = append(p.exclude, netip.MustParseAddr(s))
		}
		for k, r := range d.ranges {
			for a := r.start; ; a = a.Next() {
				if a != r.gateway && !slices.Contains(p.exclude, a) {
					p.order = append(p.order, a)
					p.rangeOf = append(p.rangeOf, k)
				}
				if a == r.end {
					break
				}
			}
		}
		m.pools = append(m.pools, p)
	}
	return m
}

func (m *modelAlloc) pool(name string) *modelPool {
	for _, p := range m.pools {
		if p.name == name {
			return p
		}
	}
	panic("no model pool " + name)
}

// rangeIndex returns the first range of p that contains ip, or -1.
func (p *modelPool) rangeIndex(ip netip.Addr) int {
	for k, r := range p.ranges {
		if r.contains(ip) {
			return k
		}
	}
	return -1
}

// holder returns the index in m.holds of the claim on ip in pool, or -1.
func (m *modelAlloc) holder(pool string, ip netip.Addr) int {
	for i := range m.holds {
		if m.holds[i].ip == ip && m.holds[i].pool == pool {
			return i
		}
	}
	return -1
}

// held returns what owner holds in pool for iface.
func (m *modelAlloc) held(owner int, iface, pool string) (netip.Addr, bool) {
	for _, h := range m.holds {
		if h.owner == owner && h.iface == iface && h.pool == pool {
			return h.ip, true
		}
	}
	return netip.Addr{}, false
}

// pick returns the address the pool hands out next.
func (m *modelAlloc) pick(p *modelPool) (netip.Addr, bool) {
	n := len(p.order)
	start := 0
	if p.strategy == ipam.RoundRobin && p.cursor.IsValid() {
		if k := p.rangeIndex(p.cursor); k >= 0 {
			start = n // the cursor is after every allocatable address: wrap
			for i, a := range p.order {
				if p.rangeOf[i] > k || (p.rangeOf[i] == k && p.cursor.Less(a)) {
					start = i
					break
				}
			}
		}
	}
	for j := range n {
		if a := p.order[(start+j)%n]; m.holder(p.name, a) < 0 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// modelResult is what an operation returned: the addresses, or the names of
// the sentinel errors the error matches.
type modelResult struct {
	ips  []modelIP
	errs []string
	// rolledBack reports that the reference gave back addresses it had claimed
	// in the failed call (not compared).
	rolledBack bool
}

// modelIP is the part of an ipam.IPConfig the reference predicts.
type modelIP struct {
	iface, pool string
	addr        netip.Prefix
	gw          netip.Addr
	reused      bool
}

func (c modelIP) String() string {
	s := fmt.Sprintf("%s %s %s gw %s", c.iface, c.pool, c.addr, c.gw)
	if c.reused {
		s += " reused"
	}
	return s
}

func (r modelResult) equal(o modelResult) bool {
	return slices.Equal(r.ips, o.ips) && slices.Equal(r.errs, o.errs)
}

func (r modelResult) String() string {
	if r.errs != nil {
		return "error " + strings.Join(r.errs, "+")
	}
	var parts []string
	for _, c := range r.ips {
		parts = append(parts, c.String())
	}
	return "ok [" + strings.Join(parts, "; ") + "]"
}

// modelSentinels are the errors callers branch on, in a fixed order.
var modelSentinels = []struct {
	name string
	err  error
}{
	{"ErrExhausted", ipam.ErrExhausted},
	{"ErrUnavailable", ipam.ErrUnavailable},
	{"ErrNotInRange", ipam.ErrNotInRange},
	{"ErrOwnerConflict", ipam.ErrOwnerConflict},
	{"ErrNotFound", ipam.ErrNotFound},
	{"ErrInvalid", ipam.ErrInvalid},
	{"ErrConflict", ipam.ErrConflict},
}

// modelErrResult returns the modelResult of the sentinels in names (a set).
func modelErrResult(names ...string) modelResult {
	var out []string
	for _, s := range modelSentinels {
		if slices.Contains(names, s.name) {
			out = append(out, s.name)
		}
	}
	return modelResult{errs: out}
}

func modelRealResult(res ipam.Result, err error) modelResult {
	if err == nil {
		out := modelResult{ips: make([]modelIP, 0, len(res.IPs))}
		for _, c := range res.IPs {
			out.ips = append(out.ips, modelIP{c.Interface, c.Pool, c.Address, c.Gateway, c.Reused})
		}
		return out
	}
	out := modelResult{errs: []string{}}
	for _, s := range modelSentinels {
		if errors.Is(err, s.err) {
			out.errs = append(out.errs, s.name)
		}
	}
	if len(out.errs) == 0 {
		out.errs = append(out.errs, "other: "+err.Error())
	}
	if len(res.IPs) > 0 {
		out.errs = append(out.errs, fmt.Sprintf("and %d addresses", len(res.IPs)))
	}
	return out
}

// allocate is Allocate on the reference.
func (m *modelAlloc) allocate(owner int, ifaces []ipam.NIC) modelResult {
	type task struct {
		iface string
		pool  *modelPool
		want  netip.Addr
	}
	// Place every requested address before claiming anything: each to the first
	// pool of its interface whose ranges contain it and that has none yet.
	var tasks []task
	for _, ifc := range ifaces {
		first := len(tasks)
		for _, name := range ifc.Pools {
			tasks = append(tasks, task{iface: ifc.Name, pool: m.pool(name)})
		}
		var errs []string
		var placedIPs []netip.Addr
		for _, ip := range ifc.IPs {
			if slices.Contains(placedIPs, ip) {
				continue
			}
			placedIPs = append(placedIPs, ip)
			placed := false
			for k := first; k < len(tasks); k++ {
				t := &tasks[k]
				if t.want.IsValid() || t.pool.rangeIndex(ip) < 0 {
					continue
				}
				t.want, placed = ip, true
				if !slices.Contains(t.pool.order, ip) {
					errs = append(errs, "ErrUnavailable") // gateway or excluded
				}
				break
			}
			if !placed {
				errs = append(errs, "ErrNotInRange")
			}
		}
		if len(errs) > 0 {
			return modelErrResult(errs...)
		}
	}

	// Claim in order; on failure, give back what this call claimed.
	var claimed []modelHold
	fail := func(sentinel string) modelResult {
		for _, c := range claimed {
			i := m.holder(c.pool, c.ip)
			m.holds = slices.Delete(m.holds, i, i+1)
		}
		res := modelErrResult(sentinel)
		res.rolledBack = len(claimed) > 0
		return res
	}
	// First what the owner holds (a conflicting request fails before anything
	// is claimed), then requested addresses, then dynamic ones, so that no
	// dynamic pick can take an address another task of the call requested.
	ips := make([]netip.Addr, len(tasks))
	reused := make([]bool, len(tasks))
	for i, t := range tasks {
		if ip, ok := m.held(owner, t.iface, t.pool.name); ok {
			if t.want.IsValid() && t.want != ip {
				return fail("ErrOwnerConflict")
			}
			ips[i], reused[i] = ip, true
		}
	}
	for pass := 0; pass < 2; pass++ {
		for i, t := range tasks {
			p := t.pool
			if reused[i] || t.want.IsValid() != (pass == 0) {
				continue
			}
			var ip netip.Addr
			if pass == 0 {
				if m.holder(p.name, t.want) >= 0 {
					return fail("ErrUnavailable")
				}
				ip = t.want
			} else {
				var ok bool
				if ip, ok = m.pick(p); !ok {
					return fail("ErrExhausted")
				}
			}
			p.cursor = ip // moves even if the call fails later
			h := modelHold{pool: p.name, ip: ip, owner: owner, iface: t.iface}
			m.holds = append(m.holds, h)
			claimed = append(claimed, h)
			ips[i] = ip
		}
	}
	out := modelResult{ips: []modelIP{}}
	for i, t := range tasks {
		p := t.pool
		r := p.ranges[p.rangeIndex(ips[i])]
		out.ips = append(out.ips, modelIP{t.iface, p.name, netip.PrefixFrom(ips[i], r.subnet.Bits()), r.gateway, reused[i]})
	}
	return out
}

// release is Release on the reference: iface "" releases every interface.
func (m *modelAlloc) release(owner int, iface string) {
	m.holds = slices.DeleteFunc(m.holds, func(h modelHold) bool {
		return h.owner == owner && (iface == "" || h.iface == iface)
	})
}

// releaseIP is ReleaseIP on the reference.
func (m *modelAlloc) releaseIP(pool string, ip netip.Addr) modelResult {
	i := m.holder(pool, ip)
	if i < 0 {
		return modelErrResult("ErrNotFound")
	}
	m.holds = slices.Delete(m.holds, i, i+1)
	return modelResult{}
}

// lookup is Lookup on the reference: sorted by pool, then address.
func (m *modelAlloc) lookup(owner int) []modelHold {
	return m.holdsWhere(func(h modelHold) bool { return h.owner == owner })
}

// claims returns the claims of pool, sorted by address.
func (m *modelAlloc) claims(pool string) []modelHold {
	return m.holdsWhere(func(h modelHold) bool { return h.pool == pool })
}

// holdsWhere returns the holdings keep selects, sorted by pool and address.
func (m *modelAlloc) holdsWhere(keep func(modelHold) bool) []modelHold {
	out := []modelHold{}
	for _, h := range m.holds {
		if keep(h) {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, compareModelHolds)
	return out
}

func compareModelHolds(a, b modelHold) int {
	if c := strings.Compare(a.pool, b.pool); c != 0 {
		return c
	}
	return a.ip.Compare(b.ip)
}

func (m *modelAlloc) String() string {
	var b strings.Builder
	for _, p := range m.pools {
		fmt.Fprintf(&b, "  pool %s (%s) cursor %s:", p.name, p.strategy, p.cursor)
		for _, h := range m.claims(p.name) {
			fmt.Fprintf(&b, " %s=%d/%s", h.ip, h.owner, h.iface)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ---- operations ----

type modelOpKind int

const (
	opAllocate modelOpKind = iota
	opRepeat               // Allocate again for what an owner holds
	opRelease
	opReleaseIP
	opRestart // a new Allocator on the same Store, after setting cursors in it
)

// modelOp is one concrete operation, so that a sequence replays without the
// generator.
type modelOp struct {
	kind    modelOpKind
	owner   int
	ifaces  []ipam.NIC  // allocate, repeat
	iface   string      // release; "" for every interface
	pool    string      // releaseIP
	ip      netip.Addr  // releaseIP
	cursors []modelHold // restart: pool and ip of each cursor to set
}

func (o modelOp) String() string {
	switch o.kind {
	case opAllocate, opRepeat:
		var b strings.Builder
		if o.kind == opRepeat {
			b.WriteString("repeat-")
		}
		fmt.Fprintf(&b, "allocate owner %d", o.owner)
		for _, ifc := range o.ifaces {
			fmt.Fprintf(&b, " [%s: %s", ifc.Name, strings.Join(ifc.Pools, ","))
			if len(ifc.IPs) > 0 {
				fmt.Fprintf(&b, " ips %v", ifc.IPs)
			}
			b.WriteString("]")
		}
		return b.String()
	case opRelease:
		if o.iface == "" {
			return fmt.Sprintf("release owner %d", o.owner)
		}
		return fmt.Sprintf("release owner %d %s", o.owner, o.iface)
	case opReleaseIP:
		return fmt.Sprintf("releaseIP %s %s", o.pool, o.ip)
	case opRestart:
		var parts []string
		for _, c := range o.cursors {
			parts = append(parts, c.pool+"="+c.ip.String())
		}
		return "restart, cursors " + strings.Join(parts, " ")
	}
	return "?"
}

func formatModelOps(ops []modelOp, first int) string {
	var b strings.Builder
	for i, o := range ops {
		fmt.Fprintf(&b, "  %3d %s\n", first+i, o)
	}
	return b.String()
}

// modelProbes returns every address a request or cursor may name: each
// range's addresses with its neighbours, gateway and network address, the
// excluded addresses, and addresses outside every pool.
func modelProbes() []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, d := range modelPoolDefs {
		for _, r := range d.ranges {
			add(r.subnet.Addr())
			add(r.gateway)
			add(r.start.Prev())
			for a := r.start; ; a = a.Next() {
				add(a)
				if a == r.end {
					break
				}
			}
			add(r.end.Next())
		}
		for _, s := range d.exclude {
			add(netip.MustParseAddr(s))
		}
	}
	for _, s := range modelExtraProbes {
		add(netip.MustParseAddr(s))
	}
	return out
}

var modelProbeAddrs = modelProbes()

func modelPick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// genModelOp returns a random operation, aimed by the reference's state.
func genModelOp(rng *rand.Rand, m *modelAlloc) modelOp {
	var holders []int
	for _, h := range m.holds {
		if !slices.Contains(holders, h.owner) {
			holders = append(holders, h.owner)
		}
	}
	slices.Sort(holders)
	switch r := rng.IntN(100); {
	case r < 15 && len(holders) > 0:
		return genRepeat(rng, m, modelPick(rng, holders))
	case r < 35:
		op := modelOp{kind: opRelease, owner: rng.IntN(modelOwners)}
		if len(holders) > 0 && rng.IntN(4) > 0 {
			op.owner = modelPick(rng, holders)
		}
		if rng.IntN(2) == 0 {
			op.iface = modelPick(rng, modelIfaces)
		}
		return op
	case r < 48:
		p := modelPick(rng, m.pools)
		op := modelOp{kind: opReleaseIP, pool: p.name, ip: modelPick(rng, modelProbeAddrs)}
		if cs := m.claims(p.name); len(cs) > 0 && rng.IntN(10) < 7 {
			op.ip = modelPick(rng, cs).ip
		}
		return op
	case r < 51:
		op := modelOp{kind: opRestart}
		for _, p := range m.pools {
			if rng.IntN(2) == 0 {
				op.cursors = append(op.cursors, modelHold{pool: p.name, ip: modelPick(rng, modelProbeAddrs)})
			}
		}
		return op
	}
	op := modelOp{kind: opAllocate, owner: rng.IntN(modelOwners)}
	names := slices.Clone(modelIfaces)
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	n := 1
	if rng.IntN(10) < 3 {
		n = 2
	}
	for _, name := range names[:n] {
		pools := make([]string, len(m.pools))
		for i, k := range rng.Perm(len(m.pools)) {
			pools[i] = m.pools[k].name
		}
		pools = pools[:1+min(rng.IntN(4), 2)]
		ifc := ipam.NIC{Name: name, Pools: pools}
		switch r := rng.IntN(20); {
		case r < 6:
			ifc.IPs = []netip.Addr{genRequested(rng, m, pools)}
		case r < 7:
			ifc.IPs = []netip.Addr{genRequested(rng, m, pools), genRequested(rng, m, pools)}
		}
		op.ifaces = append(op.ifaces, ifc)
	}
	return op
}

// genRequested returns an address to request for pools: free, taken, a
// gateway, excluded, or anything.
func genRequested(rng *rand.Rand, m *modelAlloc, pools []string) netip.Addr {
	p := m.pool(modelPick(rng, pools))
	var free, taken []netip.Addr
	for _, a := range p.order {
		if m.holder(p.name, a) < 0 {
			free = append(free, a)
		} else {
			taken = append(taken, a)
		}
	}
	switch r := rng.IntN(10); {
	case r < 4 && len(free) > 0:
		return modelPick(rng, free)
	case r < 6 && len(taken) > 0:
		return modelPick(rng, taken)
	case r < 7:
		return modelPick(rng, p.ranges).gateway
	case r < 8:
		return modelPick(rng, modelPick(rng, m.pools).exclude)
	}
	return modelPick(rng, modelProbeAddrs)
}

// genRepeat asks again for what owner holds, in a random order, sometimes
// requesting the held address, another address, or one more pool.
func genRepeat(rng *rand.Rand, m *modelAlloc, owner int) modelOp {
	op := modelOp{kind: opRepeat, owner: owner}
	byIface := map[string][]modelHold{}
	var names []string
	for _, h := range m.lookup(owner) {
		if byIface[h.iface] == nil {
			names = append(names, h.iface)
		}
		byIface[h.iface] = append(byIface[h.iface], h)
	}
	slices.Sort(names)
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for _, name := range names {
		hs := byIface[name]
		rng.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
		ifc := ipam.NIC{Name: name}
		for _, h := range hs {
			ifc.Pools = append(ifc.Pools, h.pool)
		}
		switch r := rng.IntN(20); {
		case r < 5:
			ifc.IPs = []netip.Addr{modelPick(rng, hs).ip}
		case r < 7:
			ifc.IPs = []netip.Addr{genRequested(rng, m, ifc.Pools)}
		case r < 10:
			for _, p := range m.pools {
				if !slices.Contains(ifc.Pools, p.name) {
					ifc.Pools = append(ifc.Pools, p.name)
					break
				}
			}
		}
		op.ifaces = append(op.ifaces, ifc)
	}
	return op
}

// ---- running both sides ----

// modelRun is one sequence: the Allocator on a memstore, and the reference.
type modelRun struct {
	cfg   modelConfig
	cat   *ipam.Catalog
	st    *memstore.Store
	alloc *ipam.Allocator
	m     *modelAlloc
	seen  []bool // scratch for stateDiff
}

// newModelRun starts a sequence. The pools were validated by parseModelPools,
// so an error here is a broken test.
func newModelRun(defs []modelPoolDef, cfg modelConfig) *modelRun {
	pools := make([]*ipam.Pool, len(defs))
	for i, d := range defs {
		p := *d.pool
		p.Strategy = cfg.strategies[i]
		pools[i] = &p
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		panic(err)
	}
	r := &modelRun{cfg: cfg, cat: cat, st: memstore.New(), m: newModelAlloc(defs, cfg.strategies)}
	r.restart()
	return r
}

func (r *modelRun) restart() {
	a, err := ipam.NewAllocator(ipam.Options{Pools: r.cat, Store: r.st})
	if err != nil {
		panic(err)
	}
	r.alloc = a
}

// apply runs op on the reference and returns what it returned.
func (m *modelAlloc) apply(op modelOp) modelResult {
	switch op.kind {
	case opAllocate, opRepeat:
		return m.allocate(op.owner, op.ifaces)
	case opRelease:
		m.release(op.owner, op.iface)
	case opReleaseIP:
		return m.releaseIP(op.pool, op.ip)
	case opRestart:
		for _, c := range op.cursors {
			m.pool(c.pool).cursor = c.ip
		}
	}
	return modelResult{}
}

// modelAfter returns the reference after ops.
func modelAfter(defs []modelPoolDef, cfg modelConfig, ops []modelOp) *modelAlloc {
	m := newModelAlloc(defs, cfg.strategies)
	for _, op := range ops {
		m.apply(op)
	}
	return m
}

// step runs op on both sides and returns the differences, or "".
func (r *modelRun) step(op modelOp, st *modelStats) string {
	ctx := context.Background()
	var b strings.Builder
	before := len(r.m.holds)
	want := r.m.apply(op)
	var got modelResult
	switch op.kind {
	case opAllocate, opRepeat:
		o := modelOwner(op.owner)
		req := ipam.Request{Namespace: o.Namespace, Name: o.Name, UID: o.UID, ContainerID: o.ContainerID, Interfaces: op.ifaces}
		got = modelRealResult(r.alloc.Allocate(ctx, req))
	case opRelease:
		o := modelOwner(op.owner)
		o.Interface = op.iface
		got = modelRealResult(ipam.Result{}, r.alloc.Release(ctx, o))
	case opReleaseIP:
		got = modelRealResult(ipam.Result{}, r.alloc.ReleaseIP(ctx, op.pool, op.ip))
	case opRestart:
		for _, c := range op.cursors {
			if err := r.st.SetCursor(ctx, c.pool, c.ip); err != nil {
				panic(err)
			}
		}
		r.restart()
	}
	if !want.equal(got) {
		fmt.Fprintf(&b, "result:\n  model:     %s\n  allocator: %s\n", want, got)
	}

	st.ops++
	if op.kind == opAllocate || op.kind == opRepeat {
		switch {
		case want.errs == nil:
			st.allocOK++
			for _, c := range want.ips {
				if c.reused {
					st.reused++
				}
			}
			for _, ifc := range op.ifaces {
				st.requested += len(ifc.IPs)
			}
		default:
			st.errs++
			if slices.Contains(want.errs, "ErrExhausted") {
				st.exhausted++
			}
			if want.rolledBack {
				st.rolledBack++
			}
			if before != len(r.m.holds) {
				panic("model rollback left claims")
			}
		}
	}
	b.WriteString(r.stateDiff())
	return b.String()
}

// stateDiff compares every owner's Lookup and every pool's claims in the Store
// with the reference. It runs after every operation, so it checks without
// allocating and builds the readable diff only when something differs.
func (r *modelRun) stateDiff() string {
	ctx := context.Background()
	var b strings.Builder
	m := r.m
	seen := r.seen[:0]
	for range m.holds {
		seen = append(seen, false)
	}
	r.seen = seen
	// Each claim that Lookup returns must be a distinct claim of the reference
	// held by that owner; with as many claims as the reference has, that is
	// all of them.
	total, ok := 0, true
	for o := range modelOwners {
		cs, err := r.alloc.Lookup(ctx, modelOwner(o))
		if err != nil {
			fmt.Fprintf(&b, "Lookup(owner %d): %v\n", o, err)
			continue
		}
		total += len(cs)
		for i := range cs {
			c := &cs[i]
			if i > 0 && (cs[i-1].Pool > c.Pool || cs[i-1].Pool == c.Pool && !cs[i-1].IP.Less(c.IP)) {
				ok = false // not sorted by pool and address
			}
			k := m.holder(c.Pool, c.IP)
			if k < 0 || seen[k] || m.holds[k].owner != o || !m.sameClaim(k, c) {
				ok = false
				continue
			}
			seen[k] = true
		}
	}
	if !ok || total != len(m.holds) {
		for o := range modelOwners {
			cs, _ := r.alloc.Lookup(ctx, modelOwner(o))
			if want, got := m.lookup(o), modelHoldsOf(cs); !slices.Equal(want, got) {
				fmt.Fprintf(&b, "Lookup(owner %d) (-model +allocator):\n%s", o, gocmp.Diff(modelHoldStrings(want), modelHoldStrings(got)))
			}
		}
	}
	// The same for the Store, pool by pool.
	clear(seen)
	total, ok = 0, true
	for _, p := range m.pools {
		cs, err := r.st.List(ctx, p.name)
		if err != nil {
			fmt.Fprintf(&b, "List(%s): %v\n", p.name, err)
			continue
		}
		total += len(cs)
		for i := range cs {
			c := &cs[i]
			k := m.holder(c.Pool, c.IP)
			if k < 0 || seen[k] || c.Pool != p.name || !m.sameClaim(k, c) {
				ok = false
				continue
			}
			seen[k] = true
		}
	}
	if !ok || total != len(m.holds) {
		for _, p := range m.pools {
			cs, _ := r.st.List(ctx, p.name)
			got := modelHoldsOf(cs)
			slices.SortFunc(got, compareModelHolds)
			if want := m.claims(p.name); !slices.Equal(want, got) {
				fmt.Fprintf(&b, "Store claims of %s (-model +store):\n%s", p.name, gocmp.Diff(modelHoldStrings(want), modelHoldStrings(got)))
			}
		}
	}
	return b.String()
}

// sameClaim reports whether c records the owner and interface of the
// reference's claim k.
func (m *modelAlloc) sameClaim(k int, c *store.Claim) bool {
	h := &m.holds[k]
	w := &modelOwnerList[h.owner]
	return h.iface == c.Owner.Interface && w.UID == c.Owner.UID && w.ContainerID == c.Owner.ContainerID &&
		w.Name == c.Owner.Name && w.Namespace == c.Owner.Namespace
}

func modelHoldsOf(cs []store.Claim) []modelHold {
	out := make([]modelHold, 0, len(cs))
	for _, c := range cs {
		out = append(out, modelHold{pool: c.Pool, ip: c.IP, owner: modelOwnerIndex(c.Owner), iface: c.Owner.Interface})
	}
	return out
}

func modelHoldStrings(hs []modelHold) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}

// realState prints the Store's claims and cursors and every owner's Lookup.
func (r *modelRun) realState() string {
	ctx := context.Background()
	var b strings.Builder
	for _, p := range r.m.pools {
		cur, _ := r.st.Cursor(ctx, p.name)
		cs, _ := r.st.List(ctx, p.name)
		got := modelHoldsOf(cs)
		slices.SortFunc(got, compareModelHolds)
		fmt.Fprintf(&b, "  store %s cursor %s:", p.name, cur)
		for _, h := range got {
			fmt.Fprintf(&b, " %s=%d/%s", h.ip, h.owner, h.iface)
		}
		b.WriteByte('\n')
	}
	for o := range modelOwners {
		cs, err := r.alloc.Lookup(ctx, modelOwner(o))
		if err != nil {
			fmt.Fprintf(&b, "  Lookup(owner %d): %v\n", o, err)
		} else if len(cs) > 0 {
			fmt.Fprintf(&b, "  Lookup(owner %d): %v\n", o, modelHoldStrings(modelHoldsOf(cs)))
		}
	}
	return b.String()
}

// replayModel runs ops on a fresh pair and returns the index of the first
// divergence, or -1.
func replayModel(defs []modelPoolDef, cfg modelConfig, ops []modelOp) int {
	run := newModelRun(defs, cfg)
	var st modelStats
	for i, op := range ops {
		if run.step(op, &st) != "" {
			return i
		}
	}
	return -1
}

// shrinkModelOps removes chunks of ops, then single ops, while the sequence
// still diverges, within a time budget, and returns the result printed.
func shrinkModelOps(defs []modelPoolDef, cfg modelConfig, ops []modelOp) string {
	ops = slices.Clone(ops)
	deadline := time.Now().Add(20 * time.Second)
	for chunk := len(ops) / 2; chunk >= 1 && time.Now().Before(deadline); chunk /= 2 {
		for i := 0; i+chunk <= len(ops) && time.Now().Before(deadline); {
			cand := slices.Concat(ops[:i], ops[i+chunk:])
			if k := replayModel(defs, cfg, cand); k >= 0 {
				ops = cand[:k+1]
			} else {
				i += chunk
			}
		}
	}
	k := replayModel(defs, cfg, ops)
	if k < 0 {
		return "  (the sequence no longer diverges on replay: the divergence depends on timing)\n"
	}
	run := newModelRun(defs, cfg)
	var st modelStats
	for _, op := range ops[:k] {
		run.step(op, &st)
	}
	return formatModelOps(ops, 0) + "  diverging at the last op:\n" + run.step(ops[k], &st)
}
