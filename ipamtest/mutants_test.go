package ipamtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
)

var (
	mutantsRun  = flag.Bool("mutants", true, "run TestMutants, which builds and runs TestManyWriters once per mutant (a few tens of seconds); -mutants=false skips it")
	mutantsBase = flag.String("mutants.base", "", "an overlay file (see go help build) that TestMutants applies under every mutant, such as a candidate fix of package ipam")
)

// mutant is a broken Allocator or Store that the default run of
// TestManyWriters must catch.
type mutant struct {
	name string
	// edits change files of package ipam, each replacing text that must
	// occur exactly once; files adds files to it, from testdata/mutants.
	edits []edit
	files []string
	// store names a broken Store of storeMutants instead.
	store string
	// want are the invariants its first violation may name.
	want []ipamtest.Invariant
}

// edit replaces old, which must occur exactly once in file, with new.
type edit struct{ file, old, new string }

// mutants are the Allocator and Store mutants of issue 12.
var mutants = []mutant{
	{
		// A stale owner answer trusted: the Allocator caches what each owner
		// holds across calls, as its owner index once did, and forgets it
		// only when it writes to the Store itself.
		name:  "owner-cache",
		files: []string{"ownercache.go"},
		edits: []edit{
			{"holdings.go", "	cs, err := a.store.Owned(ctx, q)\n", "	cs, err := a.cachedOwned(ctx, q)\n"},
			{"ipam.go", "	a.plan = planFor(a.store, a.static, a.log)\n", "	a.store = forgetOnWrite(a, a.store)\n	a.plan = planFor(a.store, a.static, a.log)\n"},
		},
		want: []ipamtest.Invariant{ipamtest.InvariantLookup, ipamtest.InvariantStore, ipamtest.InvariantKept, ipamtest.InvariantIdempotent, ipamtest.InvariantUnique, ipamtest.InvariantError},
	},
	{
		// A claim released through a stale answer: a release whose delete
		// met a changed claim deletes the new one, whoever holds it now.
		name:  "release-ignores-owner",
		edits: []edit{{"release.go", "			case !f.lets(cur):\n", "			case false && !f.lets(cur):\n"}},
		want:  []ipamtest.Invariant{ipamtest.InvariantKept},
	},
	{
		// A claim released through a stale answer: a release deletes the
		// claim at whatever revision it has now.
		name: "release-ignores-revision",
		edits: []edit{{"release.go", "	for attempt := 0; ; attempt++ {\n		err := a.store.Delete(ctx, c.Pool, c.IP, c.Revision)\n",
			"	for attempt := 0; ; attempt++ {\n		if cur, err := a.store.Get(ctx, c.Pool, c.IP); err == nil {\n			c.Revision = cur.Revision\n		}\n		err := a.store.Delete(ctx, c.Pool, c.IP, c.Revision)\n"}},
		want: []ipamtest.Invariant{ipamtest.InvariantKept},
	},
	{
		// An interface-less claim adopted by the wrong interface: a claim
		// that records no interface serves any selected interface of its
		// family, whether or not its pool is one of that interface's.
		name:  "serves-any-pool",
		edits: []edit{{"holdings.go", "	return c.Owner.Interface != \"\" || slices.Contains(t.sel.Pools, c.Pool)\n", "	return true\n"}},
		// The wrong interface served from a pool not its own, or a claim
		// that another interface needed taken from it.
		want: []ipamtest.Invariant{ipamtest.InvariantSelection, ipamtest.InvariantSticky, ipamtest.InvariantIdempotent},
	},
	// Broken Stores: an address handed to a second owner, or a claim
	// changed or deleted under its holder.
	{name: "create-overwrites", store: "create-overwrites", want: storeBroken},
	{name: "update-ignores-revision", store: "update-ignores-revision", want: storeBroken},
	{name: "delete-ignores-revision", store: "delete-ignores-revision", want: storeBroken},
}

var storeBroken = []ipamtest.Invariant{ipamtest.InvariantUnique, ipamtest.InvariantKept, ipamtest.InvariantStore}

// violationLine matches the first line of a Violation in a test's output.
var violationLine = regexp.MustCompile(`ipamtest: seed (\d+), step \d+: invariant "([a-z-]+)" violated: .*`)

// TestMutants proves the power of TestManyWriters: for each mutant, it
// builds this package's tests with package ipam changed (go test -c
// -overlay, the real files untouched) or a broken Store wrapped around every
// agent's, runs the default run of TestManyWriters (stopping at the first
// failing seed), and requires it to fail with one of the invariants the
// mutant must break, on a seed that the same build without the mutant
// passes. The mutants build and run in parallel. With -mutants.base, every
// mutant also carries that overlay (a fix under review, say).
func TestMutants(t *testing.T) {
	if testing.Short() || !*mutantsRun {
		t.Skip("-short or -mutants=false")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	base := map[string]string{}
	if *mutantsBase != "" {
		b, err := os.ReadFile(*mutantsBase)
		require.NoError(t, err)
		var o struct{ Replace map[string]string }
		require.NoError(t, json.Unmarshal(b, &o), "overlay %s", *mutantsBase)
		base = o.Replace
	}
	dir := t.TempDir()
	// Builds are the cost: at most one per CPU at a time.
	builds := make(chan struct{}, runtime.GOMAXPROCS(0))
	build := func(t *testing.T, name string, overlay map[string]string) string {
		b, err := json.Marshal(map[string]any{"Replace": overlay})
		require.NoError(t, err)
		ov := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(ov, b, 0o644))
		bin := filepath.Join(dir, name+".test")
		builds <- struct{}{}
		defer func() { <-builds }()
		args := []string{"test", "-c", "-vet=off", "-overlay=" + ov, "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool, append(args, ".")...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "building mutant %s: %s", name, out)
		return bin
	}
	var plain struct {
		once sync.Once
		bin  string
	}
	plainBin := func(t *testing.T) string {
		plain.once.Do(func() { plain.bin = build(t, "plain", base) })
		require.NotEmpty(t, plain.bin, "the build of the test binary without mutants failed")
		return plain.bin
	}
	run := func(bin string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-test.run=^TestManyWriters$", "-test.count=1"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bin := plainBin(t)
			var broken []string
			if m.store != "" {
				broken = []string{"-writers.store=" + m.store}
			} else {
				bin = build(t, m.name, m.overlay(t, root, dir, base))
			}
			start := time.Now()
			out, err := run(bin, append(broken, "-writers.failfast")...)
			took := time.Since(start)
			line := violationLine.FindStringSubmatch(out)
			require.Error(t, err, "mutant %s passed the default run of TestManyWriters", m.name)
			require.NotNil(t, line, "mutant %s failed without a violation:\n%s", m.name, out)
			require.Contains(t, m.want, ipamtest.Invariant(line[2]), "mutant %s broke an unexpected invariant: %s", m.name, line[0])
			// The same seed without the mutant passes: the mutant broke it.
			out, err = run(plainBin(t), "-writers.seed="+line[1])
			require.NoError(t, err, "mutant %s failed seed %s, which fails without it too:\n%s", m.name, line[1], out)
			t.Logf("mutant %s caught in %v: %s", m.name, took.Round(time.Millisecond), firstLine(line[0]))
		})
	}
}

// overlay writes the mutated files of m into dir and returns the overlay
// that puts them in package ipam (root), over base.
func (m mutant) overlay(t *testing.T, root, dir string, base map[string]string) map[string]string {
	overlay := make(map[string]string, len(base)+len(m.edits)+len(m.files))
	for k, v := range base {
		overlay[k] = v
	}
	mdir := filepath.Join(dir, m.name)
	require.NoError(t, os.MkdirAll(mdir, 0o755))
	changed := map[string]string{}
	for _, e := range m.edits {
		path := filepath.Join(root, e.file)
		text, ok := changed[path]
		if !ok {
			src := path
			if b, ok := base[path]; ok {
				src = b
			}
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			text = string(b)
		}
		n := strings.Count(text, e.old)
		require.Equal(t, 1, n, "mutant %s: %s: the text to replace occurs %d times, not once (the code moved: update the mutant):\n%s", m.name, e.file, n, e.old)
		changed[path] = strings.Replace(text, e.old, e.new, 1)
	}
	for path, text := range changed {
		out := filepath.Join(mdir, filepath.Base(path))
		require.NoError(t, os.WriteFile(out, []byte(text), 0o644))
		overlay[path] = out
	}
	for _, f := range m.files {
		path := filepath.Join(root, "zz_mutant_"+f)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "mutant %s: %s exists in package ipam", m.name, path)
		src, err := filepath.Abs(filepath.Join("testdata", "mutants", f))
		require.NoError(t, err)
		overlay[path] = src
	}
	return overlay
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// storeMutants are broken Stores, each wrapped around every agent's Store
// instance by -writers.store=<name>: the many-writers run must catch each
// (TestMutants).
var storeMutants = map[string]func(store.Store) store.Store{
	// A Create that overwrites a claim that exists, instead of refusing.
	"create-overwrites": func(s store.Store) store.Store { return newMutantStore(s, mutantStore{overwrite: true}) },
	// An Update that ignores the revision it is given.
	"update-ignores-revision": func(s store.Store) store.Store { return newMutantStore(s, mutantStore{anyRevision: true}) },
	// A Delete that ignores the revision it is given.
	"delete-ignores-revision": func(s store.Store) store.Store { return newMutantStore(s, mutantStore{anyDelete: true}) },
}

// mutantStore breaks the Store it wraps as its flags say, and passes on
// its capabilities (a wrapper that overrides Create must override the
// creates of every capability it passes on).
type mutantStore struct {
	store.Store
	cursors                           store.Cursors
	overwrite, anyRevision, anyDelete bool
}

// mutantExclusive is a mutantStore over a store.ExclusiveCreator.
type mutantExclusive struct {
	*mutantStore
	excl store.ExclusiveCreator
}

func newMutantStore(s store.Store, m mutantStore) store.Store {
	m.Store = s
	m.cursors, _ = s.(store.Cursors)
	if x, ok := s.(store.ExclusiveCreator); ok {
		return mutantExclusive{&m, x}
	}
	return &m
}

func (m *mutantStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	if old, err := m.Store.Get(ctx, c.Pool, c.IP); err == nil && m.overwrite {
		return m.Store.Update(ctx, c, old.Revision)
	}
	return m.Store.Create(ctx, c)
}

func (m *mutantStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	c, err := m.Create(ctx, c)
	if err == nil {
		err = m.SetCursor(ctx, c.Pool, c.IP)
	}
	return c, err
}

func (m *mutantStore) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	if cur, err := m.Store.Get(ctx, c.Pool, c.IP); err == nil && m.anyRevision {
		rev = cur.Revision
	}
	return m.Store.Update(ctx, c, rev)
}

func (m *mutantStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	if cur, err := m.Store.Get(ctx, pool, ip); err == nil && m.anyDelete {
		rev = cur.Revision
	}
	return m.Store.Delete(ctx, pool, ip, rev)
}

func (m *mutantStore) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if m.cursors == nil {
		return netip.Addr{}, nil
	}
	return m.cursors.Cursor(ctx, pool)
}

func (m *mutantStore) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if m.cursors == nil {
		return nil
	}
	return m.cursors.SetCursor(ctx, pool, ip)
}

// CreateExclusive checks what the owner holds as the Store does, and then
// creates as Create does.
func (m mutantExclusive) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	if !m.overwrite {
		return m.excl.CreateExclusive(ctx, c)
	}
	held, err := m.Owned(ctx, c.Owner.Query())
	if err != nil {
		return store.Claim{}, err
	}
	held = slices.DeleteFunc(held, func(h store.Claim) bool { return !store.Conflicts(c, h) })
	if len(held) > 0 {
		return store.Claim{}, &store.HeldError{Claim: c, Held: held}
	}
	return m.CreateAndSetCursor(ctx, c)
}
