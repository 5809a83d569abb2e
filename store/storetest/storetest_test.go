package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/store/storetest"
)

// mutantEnv names the mutant that TestMutantHelper runs the suite against, in a
// child process started by TestMutants.
const mutantEnv = "STORETEST_MUTANT"

// mutants are stores with one deliberate bug each (or none), and the subtests of
// the suite that must catch it. Checks whose outcome depends on scheduling (the
// races) are listed only where the bug makes them fail every time.
var mutants = []struct {
	name string
	cfg  storetest.Config
	open func(t *testing.T) storetest.Opener
	fail []string // subtests that must fail; only these and skip are run
	skip []string // subtests that must be skipped
}{
	{name: "correct", open: shared(nil)},
	{
		name: "pools-not-unique", // said to claim an address in one pool at a time, but does not
		cfg:  storetest.Config{AddressesUnique: true},
		open: shared(nil),
		fail: []string{"PoolsIndependent"},
	},
	{
		name: "create-overwrites", // a read-then-write "create or update"
		open: shared(func(m *mutant) { m.createOverwrites = true }),
		fail: []string{"CreateExists", "CreateRace", "CreateRaceInstances", "CreateAndSetCursor"},
	},
	{
		name: "update-ignores-revision", // the lost update
		open: shared(func(m *mutant) { m.updateIgnoresRev = true }),
		fail: []string{"Update", "Delete"},
	},
	{
		name: "delete-ignores-revision",
		open: shared(func(m *mutant) { m.deleteIgnoresRev = true }),
		fail: []string{"Delete"},
	},
	{
		name: "ignores-context",
		open: shared(func(m *mutant) { m.ignoresContext = true }),
		fail: []string{"CanceledContext", "CreateAndSetCursor"},
	},
	{
		name: "drops-time",
		open: shared(func(m *mutant) { m.dropsTime = true }),
		fail: []string{"CreateGet", "List", "Reopen"},
	},
	{
		name: "own-clock", // stamps claims with time.Now
		open: shared(func(m *mutant) { m.ownClock = true }),
		fail: []string{"CreateGet", "Update"},
	},
	{
		name: "drops-interface",
		open: shared(func(m *mutant) { m.dropsInterface = true }),
		fail: []string{"CreateGet"},
	},
	{
		name: "list-prefix", // lists by key prefix without a separator
		open: shared(func(m *mutant) { m.listPrefix = true }),
		fail: []string{"PoolsIndependent", "List"},
	},
	{
		name: "list-shared-slice", // hands out its cached slice
		open: shared(func(m *mutant) { m.listCache = map[string][]store.Claim{} }),
		fail: []string{"List"},
	},
	{
		name: "cursor-ignores-pool",
		open: shared(func(m *mutant) { m.cursorIgnoresPool = true }),
		fail: []string{"Cursors"},
	},
	{
		name: "cursor-set-first", // sets the cursor, then creates: a failed Create moves it
		open: shared(func(m *mutant) { m.cursorSetFirst = true }),
		fail: []string{"CreateAndSetCursor"},
	},
	{
		name: "cursor-not-set", // CreateAndSetCursor only creates
		open: shared(func(m *mutant) { m.cursorNotSet = true }),
		fail: []string{"CreateAndSetCursor"},
	},
	{
		name: "no-cursors",
		open: func(t *testing.T) storetest.Opener {
			s := memstore.New()
			return func() store.Store { return noCursors{s.Open()} }
		},
		skip: []string{"Cursors", "CreateAndSetCursor"},
	},
	{
		name: "no-cursor-creator", // Cursors without CreateAndSetCursor
		open: func(t *testing.T) storetest.Opener {
			s := memstore.New()
			return func() store.Store { o := s.Open(); return noCursorCreator{o, o} }
		},
		skip: []string{"CreateAndSetCursor"},
	},
	{
		name: "separate-backends", // the Opener opens a new backend each time
		open: func(t *testing.T) storetest.Opener {
			return func() store.Store { return memstore.New() }
		},
		fail: []string{"Reopen", "CreateRaceInstances", "UpdateRace", "UpdateDeleteRace", "Cursors", "CreateAndSetCursor"},
	},
	{
		name: "owned-cached", // each instance keeps the answers it gave until it writes
		open: shared(func(m *mutant) { m.ownedCache = map[store.OwnerQuery][]store.Claim{} }),
		fail: []string{"OwnedInstances"},
	},
	{
		name: "owned-exact-interface", // narrowing by interface drops claims that record none
		open: shared(func(m *mutant) { m.ownedExactInterface = true }),
		fail: []string{"Owned", "OwnedInstances"},
	},
	{
		name: "owned-primary-identity", // finds a claim only by its owner's primary identity
		open: shared(func(m *mutant) { m.ownedPrimaryOnly = true }),
		fail: []string{"Owned", "OwnedInstances"},
	},
	{
		name: "exclusive-check-then-create", // asks Owned, then Creates: two steps
		open: shared(func(m *mutant) { m.exclusiveTwoSteps = true }),
		fail: []string{"CreateExclusiveRace"},
	},
	{
		name: "exclusive-any-family", // refuses whatever the family
		open: shared(func(m *mutant) { m.exclusiveAnyFamily = true }),
		fail: []string{"CreateExclusive"},
	},
	{
		name: "no-exclusive-creator",
		open: func(t *testing.T) storetest.Opener {
			s := memstore.New()
			return func() store.Store { o := s.Open(); return noCursorCreator{o, o} }
		},
		skip: []string{"CreateExclusive", "CreateExclusiveRace"},
	},
	{
		name: "watch-drops-deletes",
		open: shared(func(m *mutant) { m.watchDropsDeletes = true }),
		fail: []string{"Watch"},
	},
	{
		name: "watch-empty-reset", // starts from nothing instead of the claims there are
		open: shared(func(m *mutant) { m.watchEmptyReset = true }),
		fail: []string{"Watch"},
	},
	{
		name: "no-watch",
		open: func(t *testing.T) storetest.Opener {
			s := memstore.New()
			return func() store.Store { o := s.Open(); return noCursorCreator{o, o} }
		},
		skip: []string{"Watch"},
	},
	{
		name: "owned-lags-revisions", // says its revisions are ordered, but Owned shows a claim a moment late
		open: shared(func(m *mutant) { m.ownedLags = true }),
		fail: []string{"RevisionsOrdered"},
	},
	{
		name: "per-key-revisions", // restarts a key's revision at 1 when it is created again
		open: func(t *testing.T) storetest.Opener {
			s := memstore.New()
			v := &versions{m: map[string][2]int64{}}
			return func() store.Store { return &perKey{s.Open(), v} }
		},
		fail: []string{"Delete"},
	},
}

// TestMutants runs the suite against each mutant in a child process and checks
// that the suite fails exactly where it must: it shows that the checks check.
func TestMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per mutant")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary: %v", err)
	}
	line := regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): TestMutantHelper/(\w+) `)
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			// Run only the subtests the mutant is listed against, or all of
			// them for a correct store.
			run := "^TestMutantHelper$"
			if names := slices.Concat(m.fail, m.skip); len(names) > 0 {
				run += "/^(" + strings.Join(names, "|") + ")$"
			}
			cmd := exec.CommandContext(t.Context(), exe, "-test.run="+run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the suite: %v", err)
			}
			results := map[string]string{}
			for _, sm := range line.FindAllStringSubmatch(string(out), -1) {
				results[sm[2]] = sm[1]
			}
			if len(results) == 0 {
				t.Fatalf("no subtest results in the output:\n%s", out)
			}
			if len(m.fail) == 0 && err != nil {
				t.Fatalf("the suite failed against a store without that bug:\n%s", out)
			}
			for _, name := range m.fail {
				if results[name] != "FAIL" {
					t.Errorf("subtest %s: %s, want FAIL", name, or(results[name], "not run"))
				}
			}
			for _, name := range m.skip {
				if results[name] != "SKIP" {
					t.Errorf("subtest %s: %s, want SKIP", name, or(results[name], "not run"))
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestMutantHelper runs the suite against the mutant named by $STORETEST_MUTANT;
// without it, it does nothing.
func TestMutantHelper(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("run by TestMutants")
	}
	for _, m := range mutants {
		if m.name == name {
			storetest.RunConfig(t, m.cfg, m.open)
			return
		}
	}
	t.Fatalf("no mutant %q", name)
}

// shared returns a newBackend whose Opener opens mutants, configured by set, on
// one memstore backend.
func shared(set func(*mutant)) func(t *testing.T) storetest.Opener {
	return func(t *testing.T) storetest.Opener {
		s := memstore.New()
		return func() store.Store {
			m := &mutant{s: s.Open()}
			if set != nil {
				set(m)
			}
			return m
		}
	}
}

// mutant wraps a memstore with the bugs its fields switch on.
type mutant struct {
	s *memstore.Store

	createOverwrites, updateIgnoresRev, deleteIgnoresRev bool
	ignoresContext, dropsTime, ownClock, dropsInterface  bool
	listPrefix, cursorIgnoresPool                        bool
	cursorSetFirst, cursorNotSet                         bool
	ownedExactInterface, ownedPrimaryOnly                bool
	exclusiveTwoSteps, exclusiveAnyFamily                bool
	watchDropsDeletes, watchEmptyReset                   bool
	ownedLags                                            bool
	lagSeen                                              map[string]bool                    // claims Owned has hidden once
	ownedCache                                           map[store.OwnerQuery][]store.Claim // nil: no cache

	mu        sync.Mutex
	listCache map[string][]store.Claim // nil: no cache
}

func (m *mutant) ctx(ctx context.Context) context.Context {
	if m.ignoresContext {
		return context.Background()
	}
	return ctx
}

func (m *mutant) out(c store.Claim) store.Claim {
	if m.dropsTime {
		c.Time = time.Time{}
	}
	if m.dropsInterface {
		c.Owner.Interface = ""
	}
	return c
}

func (m *mutant) in(c store.Claim) store.Claim {
	if m.ownClock {
		c.Time = time.Now()
	}
	return c
}

func (m *mutant) forget() {
	m.mu.Lock()
	if m.listCache != nil {
		clear(m.listCache)
	}
	if m.ownedCache != nil {
		clear(m.ownedCache)
	}
	m.mu.Unlock()
}

func (m *mutant) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cached, ok := m.ownedCache[q]; ok {
		return slices.Clone(cached), nil
	}
	cs, err := m.s.Owned(m.ctx(ctx), q)
	if err != nil {
		return nil, err
	}
	cs = slices.DeleteFunc(cs, func(c store.Claim) bool {
		if m.ownedLags {
			// Hide each claim from the first answer that could show it.
			if m.lagSeen == nil {
				m.lagSeen = map[string]bool{}
			}
			if !m.lagSeen[c.Key()] {
				m.lagSeen[c.Key()] = true
				return true
			}
		}
		return m.ownedExactInterface && q.Interface != "" && c.Owner.Interface != q.Interface ||
			m.ownedPrimaryOnly && c.Owner.Query().Kind != q.Kind
	})
	for i := range cs {
		cs[i] = m.out(cs[i])
	}
	if m.ownedCache != nil {
		m.ownedCache[q] = slices.Clone(cs)
	}
	return cs, nil
}

// RevisionsOrdered is memstore's: true.
func (m *mutant) RevisionsOrdered() bool { return m.s.RevisionsOrdered() }

// Watch is memstore's, through a handler that drops deletions or empties the
// first list as the mutant says.
func (m *mutant) Watch(ctx context.Context, h store.WatchHandler) error {
	return m.s.Watch(m.ctx(ctx), &mutantHandler{h: h, m: m})
}

type mutantHandler struct {
	h     store.WatchHandler
	m     *mutant
	reset bool
}

func (x *mutantHandler) Reset(cs []store.Claim) {
	if x.m.watchEmptyReset && !x.reset {
		cs = nil
	}
	x.reset = true
	x.h.Reset(cs)
}

func (x *mutantHandler) Apply(e store.Event) {
	if x.m.watchDropsDeletes && e.Deleted {
		return
	}
	x.h.Apply(e)
}

// CreateExclusive is memstore's, or with exclusiveTwoSteps an Owned, a pause
// and a CreateAndSetCursor, or with exclusiveAnyFamily memstore's that also
// refuses for a claim of the other family.
func (m *mutant) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	if m.exclusiveTwoSteps || m.exclusiveAnyFamily {
		held, err := m.Owned(ctx, c.Owner.Query())
		if err != nil {
			return store.Claim{}, err
		}
		held = slices.DeleteFunc(held, func(h store.Claim) bool {
			return !m.exclusiveAnyFamily && !store.Conflicts(c, h)
		})
		if len(held) > 0 {
			return store.Claim{}, &store.HeldError{Claim: c, Held: held}
		}
		if m.exclusiveTwoSteps {
			time.Sleep(5 * time.Millisecond) // let every racer pass the check
		}
		return m.CreateAndSetCursor(ctx, c)
	}
	defer m.forget()
	got, err := m.s.CreateExclusive(m.ctx(ctx), m.in(c))
	return m.out(got), err
}

func (m *mutant) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	c, err := m.s.Get(m.ctx(ctx), pool, ip)
	return m.out(c), err
}

func (m *mutant) List(ctx context.Context, pool string) ([]store.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cached, ok := m.listCache[pool]; ok {
		return cached, nil
	}
	cs, err := m.s.List(m.ctx(ctx), pool)
	if err != nil {
		return nil, err
	}
	if m.listPrefix {
		more, err := m.s.List(m.ctx(ctx), pool+"-2")
		if err != nil {
			return nil, err
		}
		cs = append(cs, more...)
	}
	for i := range cs {
		cs[i] = m.out(cs[i])
	}
	if m.listCache != nil {
		m.listCache[pool] = cs
	}
	return cs, nil
}

func (m *mutant) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	defer m.forget()
	got, err := m.s.Create(m.ctx(ctx), m.in(c))
	if m.createOverwrites && errors.Is(err, store.ErrExists) {
		var cur store.Claim
		if cur, err = m.s.Get(m.ctx(ctx), c.Pool, c.IP); err == nil {
			got, err = m.s.Update(m.ctx(ctx), m.in(c), cur.Revision)
		}
	}
	return m.out(got), err
}

func (m *mutant) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	defer m.forget()
	if m.updateIgnoresRev {
		if cur, err := m.s.Get(m.ctx(ctx), c.Pool, c.IP); err == nil {
			rev = cur.Revision
		}
	}
	got, err := m.s.Update(m.ctx(ctx), m.in(c), rev)
	return m.out(got), err
}

func (m *mutant) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	defer m.forget()
	if m.deleteIgnoresRev {
		if cur, err := m.s.Get(m.ctx(ctx), pool, ip); err == nil {
			rev = cur.Revision
		}
	}
	return m.s.Delete(m.ctx(ctx), pool, ip, rev)
}

func (m *mutant) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if m.cursorIgnoresPool {
		pool = ""
	}
	return m.s.Cursor(m.ctx(ctx), pool)
}

func (m *mutant) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if m.cursorIgnoresPool {
		pool = ""
	}
	return m.s.SetCursor(m.ctx(ctx), pool, ip)
}

// CreateAndSetCursor is memstore's, or with cursorSetFirst a SetCursor and then a
// Create, or with cursorNotSet a Create alone. With createOverwrites it is Create
// and SetCursor, so that it overwrites as Create does.
func (m *mutant) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	switch {
	case m.cursorSetFirst:
		if err := m.SetCursor(ctx, c.Pool, c.IP); err != nil {
			return store.Claim{}, err
		}
		return m.Create(ctx, c)
	case m.cursorNotSet:
		return m.Create(ctx, c)
	case m.createOverwrites:
		got, err := m.Create(ctx, c)
		if err == nil {
			err = m.SetCursor(ctx, c.Pool, c.IP)
		}
		return got, err
	}
	defer m.forget()
	got, err := m.s.CreateAndSetCursor(m.ctx(ctx), m.in(c))
	return m.out(got), err
}

// noCursors hides the Cursors capability of the store it wraps.
type noCursors struct{ store.Store }

// noCursorCreator hides the CursorCreator capability of the store it wraps, and
// shows its Cursors.
type noCursorCreator struct {
	store.Store
	store.Cursors
}

// versions maps each key to its memstore revision and the per-key version
// perKey shows in its place.
type versions struct {
	mu sync.Mutex
	m  map[string][2]int64 // key: {memstore revision, per-key version}
}

// perKey is a store whose revisions count the writes to one key since it was
// created, starting again at 1 when the key is created again.
type perKey struct {
	s *memstore.Store
	v *versions
}

func (p *perKey) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	c, err := p.s.Get(ctx, pool, ip)
	c.Revision = p.v.m[c.Key()][1]
	return c, err
}

func (p *perKey) List(ctx context.Context, pool string) ([]store.Claim, error) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	cs, err := p.s.List(ctx, pool)
	for i := range cs {
		cs[i].Revision = p.v.m[cs[i].Key()][1]
	}
	return cs, err
}

func (p *perKey) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	got, err := p.s.Create(ctx, c)
	if err == nil {
		p.v.m[got.Key()] = [2]int64{got.Revision, 1}
		got.Revision = 1
	}
	return got, err
}

func (p *perKey) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	v, ok := p.v.m[c.Key()]
	if ok && v[1] != rev {
		return store.Claim{}, fmt.Errorf("update %s: %w", c.Key(), store.ErrConflict)
	}
	got, err := p.s.Update(ctx, c, v[0])
	if err == nil {
		p.v.m[got.Key()] = [2]int64{got.Revision, v[1] + 1}
		got.Revision = v[1] + 1
	}
	return got, err
}

func (p *perKey) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	cs, err := p.s.Owned(ctx, q)
	for i := range cs {
		cs[i].Revision = p.v.m[cs[i].Key()][1]
	}
	return cs, err
}

func (p *perKey) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	p.v.mu.Lock()
	defer p.v.mu.Unlock()
	key := store.Claim{Pool: pool, IP: ip}.Key()
	v, ok := p.v.m[key]
	if ok && v[1] != rev {
		return fmt.Errorf("delete %s: %w", key, store.ErrConflict)
	}
	err := p.s.Delete(ctx, pool, ip, v[0])
	if err == nil {
		delete(p.v.m, key)
	}
	return err
}
