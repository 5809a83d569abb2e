//go:build linux

package filestore_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
	"github.com/ipamkit/ipam/store/storetest"
)

// everything is a pool option that covers every address.
var everything = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// syncModes runs f as two subtests, with Options.Sync off and on.
func syncModes(t *testing.T, f func(t *testing.T, durable bool)) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%t", durable), func(t *testing.T) { f(t, durable) })
	}
}

// TestConformance runs the storetest suite against the filestore, each way
// with Options.Sync off and on, through adapters whose only part in the
// checks is to give each pool a directory of its own, as each host-local
// network has: one directory cannot hold one address in two pools, which the
// suite's pools do.
//
//   - ContainerOwners: the suite's owners have only a container ID and an
//     interface, as host-local's; Owned and CreateExclusive are the
//     filestore's own, through its owner index, asked of every pool's
//     directory.
//   - EncodedOwners: the whole Owner is encoded into the container ID, so
//     that the checks of pod UIDs, names and stable owners run too;
//     container IDs are then too long to name an index entry and are hashed.
//     Owned reads every claim to decode owners.
//
// Everything else (atomic create, revisions, races between instances,
// contexts, cursors) is the filestore's own.
func TestConformance(t *testing.T) {
	syncModes(t, func(t *testing.T, durable bool) {
		t.Run("ContainerOwners", func(t *testing.T) {
			storetest.RunConfig(t, storetest.Config{ContainerOwners: true}, func(t *testing.T) storetest.Opener {
				root := t.TempDir()
				return func() store.Store {
					a := &ctrAdapter{newAdapter(t, root, durable, false)}
					return a
				}
			})
		})
		t.Run("EncodedOwners", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Opener {
				root := t.TempDir()
				return func() store.Store { return newAdapter(t, root, durable, true) }
			})
		})
	})
}

// adapter is a store.Store, with store.Cursors and store.CursorCreator, over
// one filestore directory per pool under root, with every Owner encoded into
// a container ID if encoded.
type adapter struct {
	root    string
	sync    bool
	encoded bool
	mu      sync.Mutex
	stores  map[string]*filestore.Store
}

// newAdapter returns an adapter over root, closed when t ends.
func newAdapter(t *testing.T, root string, durable, encoded bool) *adapter {
	a := &adapter{root: root, sync: durable, encoded: encoded, stores: map[string]*filestore.Store{}}
	t.Cleanup(a.close)
	return a
}

func (a *adapter) store(pool string) (*filestore.Store, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.stores[pool]; s != nil {
		return s, nil
	}
	name := pool
	if name == "" { // an invalid claim: let the filestore refuse it
		name = "unnamed"
	}
	s, err := filestore.Open(filepath.Join(a.root, hex.EncodeToString([]byte(pool))+"-"),
		filestore.Options{Pools: []filestore.Pool{{Name: name, Prefixes: everything}}, Sync: a.sync})
	if err != nil {
		return nil, err
	}
	a.stores[pool] = s
	return s, nil
}

func (a *adapter) close() {
	for _, s := range a.stores {
		s.Close()
	}
}

// pools returns the pools that have a directory under the root, whichever
// instance made it.
func (a *adapter) pools() ([]string, error) {
	entries, err := os.ReadDir(a.root)
	if err != nil {
		return nil, err
	}
	var pools []string
	for _, e := range entries {
		name, err := hex.DecodeString(strings.TrimSuffix(e.Name(), "-"))
		if err == nil && len(name) > 0 {
			pools = append(pools, string(name))
		}
	}
	return pools, nil
}

// encode packs o into a container ID (and the interface), unless o is zero,
// which the filestore must refuse, or the adapter does not encode.
func (a *adapter) encode(o store.Owner) store.Owner {
	if o.IsZero() || !a.encoded {
		return o
	}
	iface := o.Interface
	o.Interface = ""
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return store.Owner{ContainerID: "x" + hex.EncodeToString(b), Interface: iface}
}

func (a *adapter) decode(o store.Owner) store.Owner {
	if !a.encoded {
		return o
	}
	b, err := hex.DecodeString(strings.TrimPrefix(o.ContainerID, "x"))
	if err != nil {
		panic(err)
	}
	var out store.Owner
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	out.Interface = o.Interface
	return out
}

func (a *adapter) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	s, err := a.store(pool)
	if err != nil {
		return store.Claim{}, err
	}
	c, err := s.Get(ctx, pool, ip)
	if err == nil {
		c.Owner = a.decode(c.Owner)
	}
	return c, err
}

func (a *adapter) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s, err := a.store(pool)
	if err != nil {
		return nil, err
	}
	cs, err := s.List(ctx, pool)
	for i := range cs {
		cs[i].Owner = a.decode(cs[i].Owner)
	}
	return cs, err
}

func (a *adapter) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return a.create(ctx, c, (*filestore.Store).Create)
}

func (a *adapter) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return a.create(ctx, c, (*filestore.Store).CreateAndSetCursor)
}

// create runs one of the Store's creates on c, its owner encoded.
func (a *adapter) create(ctx context.Context, c store.Claim, f func(*filestore.Store, context.Context, store.Claim) (store.Claim, error)) (store.Claim, error) {
	s, err := a.store(c.Pool)
	if err != nil {
		return store.Claim{}, err
	}
	owner := c.Owner
	c.Owner = a.encode(owner)
	got, err := f(s, ctx, c)
	got.Owner = owner
	return got, err
}

func (a *adapter) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	s, err := a.store(c.Pool)
	if err != nil {
		return store.Claim{}, err
	}
	owner := c.Owner
	c.Owner = a.encode(owner)
	got, err := s.Update(ctx, c, rev)
	got.Owner = owner
	return got, err
}

// Owned reads every pool's directory and keeps the claims whose decoded
// owner q matches: the owners are encoded, so the filestore's own Owned
// cannot ask for them.
func (a *adapter) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	pools, err := a.pools()
	if err != nil {
		return nil, err
	}
	var out []store.Claim
	for _, pool := range pools {
		cs, err := a.List(ctx, pool)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if q.Matches(c) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// ctrAdapter is the adapter without encoding, whose Owned is the filestore's,
// asked of every pool's directory, and which has store.ExclusiveCreator.
type ctrAdapter struct{ *adapter }

func (a *ctrAdapter) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	pools, err := a.pools()
	if err != nil {
		return nil, err
	}
	out := []store.Claim{}
	for _, pool := range pools {
		s, err := a.store(pool)
		if err != nil {
			return nil, err
		}
		cs, err := s.Owned(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// CreateExclusive refuses c if the owner holds a conflicting claim in
// another pool's directory, then asks the filestore's CreateExclusive of
// c's pool's directory, which checks that directory and creates in one step.
// Only the latter is atomic: a container's claims in two directories are two
// Stores' (as in two host-local networks), and the suite races
// CreateExclusive within one pool.
func (a *ctrAdapter) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	s, err := a.store(c.Pool)
	if err != nil {
		return store.Claim{}, err
	}
	if c.Owner.ContainerID != "" {
		held, err := a.Owned(ctx, c.Owner.Query())
		if err != nil {
			return store.Claim{}, err
		}
		var conflicts []store.Claim
		for _, h := range held {
			if store.Conflicts(c, h) {
				conflicts = append(conflicts, h)
			}
		}
		if len(conflicts) > 0 {
			return store.Claim{}, &store.HeldError{Claim: c, Held: conflicts}
		}
	}
	return s.CreateExclusive(ctx, c)
}

func (a *adapter) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	s, err := a.store(pool)
	if err != nil {
		return err
	}
	return s.Delete(ctx, pool, ip, rev)
}

func (a *adapter) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	s, err := a.store(pool)
	if err != nil {
		return netip.Addr{}, err
	}
	return s.Cursor(ctx, pool)
}

func (a *adapter) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	s, err := a.store(pool)
	if err != nil {
		return err
	}
	return s.SetCursor(ctx, pool, ip)
}

// testPools are two pools of one network directory, as a dual-stack host-local
// config has two range sets.
var testPools = []filestore.Pool{
	{Name: "net/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}},
	{Name: "net/1", Index: 1, Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}},
}

func open(t testing.TB, dir string, durable bool) *filestore.Store {
	t.Helper()
	s, err := filestore.Open(dir, filestore.Options{Pools: testPools, Sync: durable})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func ctrClaim(pool, ip, id, iface string) store.Claim {
	return store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: store.Owner{ContainerID: id, Interface: iface},
		Time: time.Date(2024, time.May, 1, 12, 34, 56, 789_012_345, time.UTC)}
}

// fileMode returns the permission bits of path.
func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return fi.Mode()
}

// TestFormat checks the files written against host-local v1.9.1's: names, exact
// bytes and modes.
func TestFormat(t *testing.T) {
	syncModes(t, func(t *testing.T, durable bool) {
		ctx := t.Context()
		dir := filepath.Join(t.TempDir(), "mynet") // created by Open
		s := open(t, dir, durable)

		want := map[string]string{
			"10.1.2.2":                         "example\r\ndummy0",
			"2001:db8:1::2":                    "example\r\ndummy0",
			"2001:db8:1:0:ffff:ffff:ffff:ffff": "0123456789abcdef\r\neth1",
			"10.1.2.254":                       "legacy", // no interface: the legacy form
		}
		for name, body := range want {
			id, iface, _ := strings.Cut(body, "\r\n")
			pool := "net/0"
			if strings.Contains(name, ":") {
				pool = "net/1"
			}
			_, err := s.Create(ctx, ctrClaim(pool, name, id, iface))
			require.NoError(t, err)
		}
		require.NoError(t, s.SetCursor(ctx, "net/0", netip.MustParseAddr("10.1.2.254")))
		require.NoError(t, s.SetCursor(ctx, "net/1", netip.MustParseAddr("2001:db8:1::2")))
		want["last_reserved_ip.0"] = "10.1.2.254"
		want["last_reserved_ip.1"] = "2001:db8:1::2"
		want["lock"] = ""

		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		got := map[string]string{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			got[e.Name()] = string(b)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("directory (-want +got):\n%s", diff)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "10.1.2.2"))
		if want := []byte{0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x0d, 0x0a, 0x64, 0x75, 0x6d, 0x6d, 0x79, 0x30}; !slices.Equal(b, want) {
			t.Errorf("10.1.2.2 holds % x, want % x", b, want)
		}
		for name := range want {
			mode := os.FileMode(0o600)
			if name == "lock" {
				mode = 0o750
			}
			if got := fileMode(t, filepath.Join(dir, name)); got != mode {
				t.Errorf("%s: mode %v, want %v", name, got, mode)
			}
		}
		if got := fileMode(t, dir); got != os.ModeDir|0o755 {
			t.Errorf("directory mode %v, want %v", got, os.ModeDir|0o755)
		}
		fi, err := os.Stat(filepath.Join(dir, "10.1.2.2"))
		require.NoError(t, err)
		if wantT := ctrClaim("", "10.1.2.2", "", "").Time; !fi.ModTime().Equal(wantT) {
			t.Errorf("10.1.2.2 modified at %v, want the claim's time %v", fi.ModTime(), wantT)
		}
	})
}

// TestReadHostLocal reads a directory as host-local leaves it: both file forms,
// a legacy file with a trailing newline, cursor and lock files, and files that
// are not claims.
func TestReadHostLocal(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2023, time.March, 4, 5, 6, 7, 0, time.UTC)
	files := map[string]string{
		"10.1.2.2":           "example\r\ndummy0",
		"10.1.2.3":           "legacyid",
		"10.1.2.4":           "legacy-newline\n",
		"10.1.2.5":           "  spaced\r\neth0\n",
		"2001:db8:1::2":      "v6ctr\r\neth0",
		"last_reserved_ip.0": "10.1.2.5",
		"last_reserved_ip.1": "2001:db8:1::2",
		"lock":               "",
		"10.9.9.9":           "outside\r\neth0", // in no pool: left alone
		"README":             "not a claim",
		".tmp-abc":           "crashed\r\neth0", // a leftover temporary file
	}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
		require.NoError(t, os.Chtimes(filepath.Join(dir, name), at, at))
	}
	s := open(t, dir, false)
	if _, err := os.Lstat(filepath.Join(dir, ".tmp-abc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open left the temporary file: %v", err)
	}
	ctx := t.Context()
	claim := func(pool, ip, id, iface string) store.Claim {
		return store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: store.Owner{ContainerID: id, Interface: iface}, Time: at}
	}
	want := []store.Claim{
		claim("net/0", "10.1.2.2", "example", "dummy0"),
		claim("net/0", "10.1.2.3", "legacyid", ""),
		claim("net/0", "10.1.2.4", "legacy-newline", ""),
		claim("net/0", "10.1.2.5", "spaced", "eth0"),
	}
	opts := cmp.Options{cmpopts.IgnoreFields(store.Claim{}, "Revision"), cmpopts.SortSlices(func(a, b store.Claim) bool { return a.IP.Less(b.IP) }),
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })}
	got, err := s.List(ctx, "net/0")
	require.NoError(t, err)
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("List(net/0) (-want +got):\n%s", diff)
	}
	got, err = s.List(ctx, "net/1")
	require.NoError(t, err)
	if diff := cmp.Diff([]store.Claim{claim("net/1", "2001:db8:1::2", "v6ctr", "eth0")}, got, opts); diff != "" {
		t.Errorf("List(net/1) (-want +got):\n%s", diff)
	}
	c, err := s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.4"))
	require.NoError(t, err)
	if diff := cmp.Diff(want[2], c, opts); diff != "" {
		t.Errorf("Get(10.1.2.4) (-want +got):\n%s", diff)
	}
	// The address outside every pool is nobody's claim here, but its file is
	// not overwritten either.
	if _, err := s.Get(ctx, "net/0", netip.MustParseAddr("10.9.9.9")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(10.9.9.9) outside the pool: %v, want store.ErrNotFound", err)
	}
	for pool, ip := range map[string]string{"net/0": "10.1.2.5", "net/1": "2001:db8:1::2"} {
		got, err := s.Cursor(ctx, pool)
		require.NoError(t, err)
		if got != netip.MustParseAddr(ip) {
			t.Errorf("Cursor(%s) = %v, want %s", pool, got, ip)
		}
	}

	// Release works on legacy files as on current ones, and Create of a held
	// address fails whatever form its file has.
	_, err = s.Create(ctx, claim("net/0", "10.1.2.3", "other", "eth0"))
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("Create over a legacy file: %v, want store.ErrExists", err)
	}
	c, err = s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.3"))
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, c.Pool, c.IP, c.Revision))
	if _, err := os.Lstat(filepath.Join(dir, "10.1.2.3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete left the file: %v", err)
	}
}

// TestCorrupt checks the corrupt-file policy: List returns the readable claims
// and an error naming every corrupt file; Get reports the file; the address
// stays taken; the revision in the error lets a writer repair or remove it.
func TestCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	good, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "good", "eth0"))
	require.NoError(t, err)

	bad := map[string]string{
		"10.1.2.10": "",                        // host-local died between create and write
		"10.1.2.11": " \n",                     // only whitespace
		"10.1.2.12": "a\r\nb\r\nc",             // three lines
		"10.1.2.13": "ctr\xff\r\neth0",         // not UTF-8
		"10.1.2.14": "two words\r\neth0",       // whitespace inside the ID
		"10.1.2.15": strings.Repeat("x", 5000), // larger than any claim
	}
	for name, body := range bad {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "10.1.2.16"), 0o755))
	require.NoError(t, os.Symlink("10.1.2.2", filepath.Join(dir, "10.1.2.17")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "2001:DB8:1::5"), []byte("upper\r\neth0"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "::ffff:10.1.2.18"), []byte("mapped\r\neth0"), 0o600))

	reasons := map[string]string{
		"10.1.2.10":        "empty file",
		"10.1.2.11":        `content " \n" is only whitespace`,
		"10.1.2.12":        `content "a\r\nb\r\nc" has more than two lines`,
		"10.1.2.13":        `content "ctr\xff\r\neth0" is not valid UTF-8`,
		"10.1.2.14":        `content "two words\r\neth0": container ID "two words" contains whitespace or a control character`,
		"10.1.2.15":        "5000 bytes, more than any claim",
		"10.1.2.16":        "not a regular file",
		"10.1.2.17":        "a symbolic link, not a regular file",
		"2001:DB8:1::5":    "file name names 2001:db8:1::5 in non-canonical form",
		"::ffff:10.1.2.18": "file name names 10.1.2.18 in its IPv4-mapped IPv6 form",
	}
	var claims []store.Claim
	var listErr error
	for _, pool := range []string{"net/0", "net/1"} {
		cs, err := s.List(ctx, pool)
		claims = append(claims, cs...)
		listErr = errors.Join(listErr, err)
	}
	if diff := cmp.Diff([]store.Claim{good}, claims, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("List returned (-want +got):\n%s", diff)
	}
	if !errors.Is(listErr, filestore.ErrCorrupt) {
		t.Fatalf("List error %v does not wrap ErrCorrupt", listErr)
	}
	got := map[string]string{}
	var revs = map[string]int64{}
	for _, line := range strings.Split(listErr.Error(), "\n") {
		if strings.HasPrefix(line, "filestore: list") {
			line = line[strings.LastIndex(line, ": corrupt claim files: ")+len(": corrupt claim files: "):]
		}
		path, reason, ok := strings.Cut(line, ": corrupt claim file: ")
		if !ok {
			t.Fatalf("unexpected line %q in List error:\n%v", line, listErr)
		}
		got[filepath.Base(path)] = reason
	}
	if diff := cmp.Diff(reasons, got); diff != "" {
		t.Errorf("corrupt files named by List (-want +got):\n%s", diff)
	}

	// Get names the file; Create cannot take the address.
	ip := netip.MustParseAddr("10.1.2.10")
	_, err = s.Get(ctx, "net/0", ip)
	var ce *filestore.CorruptError
	if !errors.As(err, &ce) || ce.IP != ip || ce.Reason != "empty file" || ce.Revision == 0 {
		t.Fatalf("Get of an empty file: %v (%+v), want a *CorruptError with a revision", err, ce)
	}
	if want := "filestore: get net/0/10.1.2.10: " + filepath.Join(dir, "10.1.2.10") + ": corrupt claim file: empty file"; err.Error() != want {
		t.Errorf("Get error %q, want %q", err, want)
	}
	revs["10.1.2.10"] = ce.Revision
	if _, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.10", "new", "eth0")); !errors.Is(err, store.ErrExists) {
		t.Errorf("Create over a corrupt file: %v, want store.ErrExists", err)
	}

	// A repair: Update the empty file at its revision; Delete another.
	fixed, err := s.Update(ctx, ctrClaim("net/0", "10.1.2.10", "fixed", "eth0"), revs["10.1.2.10"])
	require.NoError(t, err)
	if c, err := s.Get(ctx, "net/0", ip); err != nil || c != fixed {
		t.Errorf("Get after repair = %+v, %v; want %+v", c, err, fixed)
	}
	_, err = s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.12"))
	require.ErrorAs(t, err, &ce)
	if err := s.Delete(ctx, "net/0", ce.IP, ce.Revision+1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Delete of a corrupt file at a wrong revision: %v, want store.ErrConflict", err)
	}
	require.NoError(t, s.Delete(ctx, "net/0", ce.IP, ce.Revision))
}

// TestOwners checks that owners the format cannot hold are refused, naming the
// field, and that nothing is written for them.
func TestOwners(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	c := ctrClaim("net/0", "10.1.2.2", "ctr", "eth0")
	tests := []struct {
		owner       store.Owner
		msg         string
		unsupported bool
	}{
		{store.Owner{UID: "1234", Interface: "eth0"},
			`owner.uid "1234": the format keeps only the container ID and interface: owner not representable in host-local's format
owner.containerID is empty: the format identifies an owner by its container ID: owner not representable in host-local's format`, true},
		{store.Owner{Namespace: "default", Name: "web-0", UID: "1234", ContainerID: "ctr", Stable: true},
			`owner.namespace "default": the format keeps only the container ID and interface: owner not representable in host-local's format
owner.name "web-0": the format keeps only the container ID and interface: owner not representable in host-local's format
owner.uid "1234": the format keeps only the container ID and interface: owner not representable in host-local's format
owner.stable true: the format keeps only the container ID and interface: owner not representable in host-local's format`, true},
		{store.Owner{ContainerID: "a\r\nb", Interface: "eth0"},
			`owner.containerID "a\r\nb": not valid UTF-8, or contains whitespace or a control character`, false},
		{store.Owner{ContainerID: "ctr", Interface: "eth 0"},
			`owner.interface "eth 0": not valid UTF-8, or contains whitespace or a control character`, false},
		{store.Owner{ContainerID: "ctr\xff"},
			`owner.containerID "ctr\xff": not valid UTF-8, or contains whitespace or a control character`, false},
	}
	for _, tc := range tests {
		c := c
		c.Owner = tc.owner
		_, err := s.Create(ctx, c)
		if want := "filestore: create net/0/10.1.2.2: " + tc.msg; err == nil || err.Error() != want {
			t.Errorf("Create by %+v: %v, want %q", tc.owner, err, want)
		}
		if errors.Is(err, filestore.ErrUnsupportedOwner) != tc.unsupported {
			t.Errorf("Create by %+v: errors.Is(ErrUnsupportedOwner) = %t, want %t", tc.owner, !tc.unsupported, tc.unsupported)
		}
	}
	held, err := s.Create(ctx, c)
	require.NoError(t, err)
	bad := held
	bad.Owner.UID = "1234"
	if _, err := s.Update(ctx, bad, held.Revision); !errors.Is(err, filestore.ErrUnsupportedOwner) {
		t.Errorf("Update to an owner with a UID: %v, want ErrUnsupportedOwner", err)
	}
	if got, err := s.Get(ctx, c.Pool, c.IP); err != nil || got != held {
		t.Errorf("Get after refused writes = %+v, %v; want %+v", got, err, held)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 { // lock and 10.1.2.2
		t.Errorf("directory holds %d entries, want 2", len(entries))
	}
}

// TestPools checks the mapping of one directory onto several pools.
func TestPools(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	v4, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "a", "eth0"))
	require.NoError(t, err)
	v6, err := s.Create(ctx, ctrClaim("net/1", "2001:db8:1::2", "a", "eth0"))
	require.NoError(t, err)

	for pool, want := range map[string][]store.Claim{"net/0": {v4}, "net/1": {v6}, "net/2": {}} {
		got, err := s.List(ctx, pool)
		require.NoError(t, err)
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("List(%s) (-want +got):\n%s", pool, diff)
		}
	}
	// An address is looked up in its own pool only.
	if _, err := s.Get(ctx, "net/1", v4.IP); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of net/0's address in net/1: %v, want store.ErrNotFound", err)
	}
	if err := s.Delete(ctx, "net/1", v4.IP, v4.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of net/0's address in net/1: %v, want store.ErrNotFound", err)
	}
	moved := v4
	moved.Pool = "net/1"
	if _, err := s.Update(ctx, moved, v4.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update of net/0's address in net/1: %v, want store.ErrNotFound", err)
	}
	if _, err := s.Update(ctx, ctrClaim("net/2", "10.1.2.2", "a", "eth0"), v4.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update in an unknown pool: %v, want store.ErrNotFound", err)
	}
	_, err = s.Create(ctx, ctrClaim("net/1", "10.1.2.3", "a", "eth0"))
	if want := `filestore: create net/1/10.1.2.3: ip 10.1.2.3 is not in pool "net/1"'s prefixes [2001:db8:1::/64]`; err == nil || err.Error() != want {
		t.Errorf("Create outside the pool: %v, want %q", err, want)
	}
	_, err = s.Create(ctx, ctrClaim("net/2", "10.1.2.3", "a", "eth0"))
	if want := `filestore: create net/2/10.1.2.3: unknown pool "net/2": not in Options.Pools`; err == nil || err.Error() != want {
		t.Errorf("Create in an unknown pool: %v, want %q", err, want)
	}
	_, err = s.Create(ctx, store.Claim{Pool: "net/1", IP: netip.MustParseAddr("::ffff:10.1.2.3"), Owner: store.Owner{ContainerID: "a"}})
	if err == nil {
		t.Error("Create of an IPv4-mapped address succeeded")
	}

	// Cursors: one file per pool index; outside the pool, refused on write and
	// ignored on read (host-local's behaviour when range sets move).
	if err := s.SetCursor(ctx, "net/0", v6.IP); err == nil {
		t.Error("SetCursor(net/0) to an address of net/1 succeeded")
	}
	if err := s.SetCursor(ctx, "net/2", v4.IP); err == nil {
		t.Error("SetCursor of an unknown pool succeeded")
	}
	require.NoError(t, s.SetCursor(ctx, "net/0", v4.IP))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "last_reserved_ip.1"), []byte("10.1.2.2"), 0o600))
	if ip, err := s.Cursor(ctx, "net/1"); err != nil || ip.IsValid() {
		t.Errorf("Cursor(net/1) holding an address of net/0 = %v, %v; want the zero Addr", ip, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "last_reserved_ip.1"), []byte("bogus"), 0o600))
	if ip, err := s.Cursor(ctx, "net/1"); err == nil || !strings.Contains(err.Error(), `last_reserved_ip.1: content "bogus" is not an IP address`) {
		t.Errorf("Cursor(net/1) of a bogus file = %v, %v; want an error naming the file", ip, err)
	}
	require.NoError(t, s.SetCursor(ctx, "net/0", netip.Addr{}))
	if ip, err := s.Cursor(ctx, "net/0"); err != nil || ip.IsValid() {
		t.Errorf("Cursor(net/0) after clearing = %v, %v; want the zero Addr", ip, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "last_reserved_ip.0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("clearing the cursor left its file: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		opts filestore.Options
		want string
	}{
		{filestore.Options{}, "pools is empty: a directory needs at least one pool"},
		{filestore.Options{Pools: []filestore.Pool{
			{Name: "a", Index: 0, Prefixes: []netip.Prefix{p("10.0.0.0/24")}},
			{Name: "a", Index: 0, Prefixes: []netip.Prefix{p("10.0.0.128/25"), p("10.0.1.1/24"), {}}},
			{Name: "", Index: -1},
		}}, `pools[1].name "a": also the name of pools[0]
pools[1].index 0: also the index of pools[0]
pools[1].prefixes[0] 10.0.0.128/25 overlaps pools[0].prefixes[0] 10.0.0.0/24
pools[1].prefixes[1] 10.0.1.1/24: host bits set; the prefix is 10.0.1.0/24
pools[1].prefixes[2]: invalid prefix
pools[2].name is empty
pools[2].index -1: negative
pools[2].prefixes is empty`},
		{filestore.Options{Pools: []filestore.Pool{{Name: "a", Prefixes: everything}}}, ""},
	}
	for _, tc := range tests {
		err := tc.opts.Validate()
		if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || (err != nil && got != tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
	if _, err := filestore.Open(t.TempDir(), filestore.Options{}); err == nil {
		t.Error("Open with no pools succeeded")
	}
}

// TestPublish creates claims through each way a Store publishes a claim file
// (an unnamed O_TMPFILE inode linked by descriptor or through /proc, or a
// temporary file) and checks that each leaves the same file and nothing else.
func TestPublish(t *testing.T) {
	if s := open(t, t.TempDir(), false); filestore.Publishing(s) == filestore.PublishTemp {
		t.Log("this kernel, architecture or filesystem has no O_TMPFILE: every mode falls back to a temporary file")
	}
	if s := open(t, t.TempDir(), true); filestore.Publishing(s) != filestore.PublishTemp {
		t.Errorf("with Sync, publishing mode %d, want a temporary file (%d)", filestore.Publishing(s), filestore.PublishTemp)
	}
	for _, mode := range []int{filestore.PublishEmptyPath, filestore.PublishProc, filestore.PublishTemp} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, false)
			filestore.SetPublishing(s, mode)
			ctx := t.Context()
			c := ctrClaim("net/0", "10.1.2.2", "ctr", "eth0")
			got, err := s.Create(ctx, c)
			require.NoError(t, err)
			if got.Time.IsZero() || !got.Time.Equal(c.Time) || got.Revision == 0 {
				t.Errorf("Create returned time %v, revision %d; want %v and a revision", got.Time, got.Revision, c.Time)
			}
			if m := filestore.Publishing(s); m != mode {
				t.Logf("moved from mode %d to %d: the kernel refused the first", mode, m)
			}
			if _, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "other", "eth0")); !errors.Is(err, store.ErrExists) {
				t.Errorf("second Create: %v, want store.ErrExists", err)
			}
			path := filepath.Join(dir, "10.1.2.2")
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			if string(b) != "ctr\r\neth0" {
				t.Errorf("claim file holds %q", b)
			}
			fi, err := os.Lstat(path)
			require.NoError(t, err)
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode() != 0o600 || st.Nlink != 1 || !fi.ModTime().Equal(c.Time) {
				t.Errorf("claim file: mode %v, %d links, modified %v; want -rw-------, 1 link, %v", fi.Mode(), st.Nlink, fi.ModTime(), c.Time)
			}
			if again, err := s.Get(ctx, c.Pool, c.IP); err != nil || again != got {
				t.Errorf("Get = %+v, %v; want %+v", again, err, got)
			}
			if names, want := dirNames(t, dir), []string{"10.1.2.2", "lock"}; !slices.Equal(names, want) {
				t.Errorf("directory holds %q, want %q", names, want)
			}
		})
	}
}

// TestCursorFile checks how the cursor file is written: in place (the same
// inode) where the new address is no shorter than the old, replaced whole
// where it is shorter, missing or not a regular file, and always with Sync; and
// that an empty file (host-local died between truncating and writing it) reads
// as no cursor.
func TestCursorFile(t *testing.T) {
	syncModes(t, func(t *testing.T, durable bool) {
		dir := t.TempDir()
		s := open(t, dir, durable)
		ctx := t.Context()
		path := filepath.Join(dir, "last_reserved_ip.0")
		inode := func() uint64 {
			t.Helper()
			fi, err := os.Lstat(path)
			require.NoError(t, err)
			if fi.Mode() != 0o600 {
				t.Errorf("cursor file mode %v, want -rw-------", fi.Mode())
			}
			return fi.Sys().(*syscall.Stat_t).Ino
		}
		set := func(ip string) {
			t.Helper()
			require.NoError(t, s.SetCursor(ctx, "net/0", netip.MustParseAddr(ip)))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			if string(b) != ip {
				t.Errorf("after SetCursor(%s) the file holds %q", ip, b)
			}
			got, err := s.Cursor(ctx, "net/0")
			if err != nil || got != netip.MustParseAddr(ip) {
				t.Errorf("Cursor after SetCursor(%s) = %v, %v", ip, got, err)
			}
		}
		set("10.1.2.9")
		first := inode()
		for _, ip := range []string{"10.1.2.10", "10.1.2.11"} { // longer, as long
			set(ip)
			if ino := inode(); (ino == first) == durable {
				t.Errorf("SetCursor(%s) with Sync=%t: inode %d, before %d", ip, durable, ino, first)
			}
			first = inode()
		}
		set("10.1.2.2") // shorter: replaced whole
		if inode() == first {
			t.Errorf("SetCursor to a shorter address wrote over the old file in place")
		}
		got, err := s.CreateAndSetCursor(ctx, ctrClaim("net/0", "10.1.2.3", "a", "eth0"))
		require.NoError(t, err)
		if b, _ := os.ReadFile(path); string(b) != "10.1.2.3" {
			t.Errorf("after CreateAndSetCursor(%s) the cursor file holds %q", got.IP, b)
		}

		// Not a regular file: replaced, and what a symbolic link names is
		// left alone.
		target := filepath.Join(t.TempDir(), "elsewhere")
		require.NoError(t, os.WriteFile(target, []byte("x"), 0o600))
		require.NoError(t, os.Remove(path))
		require.NoError(t, os.Symlink(target, path))
		set("10.1.2.4")
		if b, _ := os.ReadFile(target); string(b) != "x" {
			t.Errorf("SetCursor wrote %q through a symbolic link", b)
		}

		require.NoError(t, os.WriteFile(path, nil, 0o600))
		if ip, err := s.Cursor(ctx, "net/0"); err != nil || ip.IsValid() {
			t.Errorf("Cursor of an empty file = %v, %v; want none", ip, err)
		}
		set("10.1.2.5")

		// Another program removes the file, or renames another over it (as
		// an older version of this package did): the Store writes the file
		// that has the name now.
		set("10.1.2.50")
		require.NoError(t, os.Remove(path))
		set("10.1.2.51")
		other := filepath.Join(dir, "other")
		require.NoError(t, os.WriteFile(other, []byte("10.1.2.7"), 0o600))
		require.NoError(t, os.Rename(other, path))
		renamed := inode()
		set("10.1.2.52")
		if ino := inode(); (ino == renamed) == durable {
			t.Errorf("with Sync=%t, the cursor file renamed in by another program has inode %d, then %d after SetCursor", durable, renamed, ino)
		}
		set("10.1.2.53")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				t.Errorf("temporary file %s left", e.Name())
			}
		}
	})
}

// TestCreateAndSetCursor checks that the cursor moves only when the claim is
// created.
func TestCreateAndSetCursor(t *testing.T) {
	syncModes(t, func(t *testing.T, durable bool) {
		dir := t.TempDir()
		s := open(t, dir, durable)
		ctx := t.Context()
		wantCursor := func(want string) {
			t.Helper()
			got, err := s.Cursor(ctx, "net/0")
			require.NoError(t, err)
			if got.String() != want {
				t.Errorf("Cursor = %v, want %s", got, want)
			}
		}
		a, err := s.CreateAndSetCursor(ctx, ctrClaim("net/0", "10.1.2.20", "a", "eth0"))
		require.NoError(t, err)
		wantCursor("10.1.2.20")
		if got, err := s.Get(ctx, a.Pool, a.IP); err != nil || got != a {
			t.Errorf("Get = %+v, %v; want %+v", got, err, a)
		}
		// Taken, refused, outside the pool: the cursor stays.
		_, err = s.CreateAndSetCursor(ctx, ctrClaim("net/0", "10.1.2.20", "b", "eth0"))
		require.ErrorIs(t, err, store.ErrExists)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "10.1.2.21"), nil, 0o600)) // host-local mid-write
		_, err = s.CreateAndSetCursor(ctx, ctrClaim("net/0", "10.1.2.21", "b", "eth0"))
		require.ErrorIs(t, err, store.ErrExists)
		bad := ctrClaim("net/0", "10.1.2.22", "b", "eth0")
		bad.Owner.UID = "1234"
		_, err = s.CreateAndSetCursor(ctx, bad)
		require.ErrorIs(t, err, filestore.ErrUnsupportedOwner)
		_, err = s.CreateAndSetCursor(ctx, ctrClaim("net/0", "2001:db8:1::9", "b", "eth0"))
		require.Error(t, err)
		wantCursor("10.1.2.20")
		if _, err := os.Lstat(filepath.Join(dir, "10.1.2.22")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused claim left its file: %v", err)
		}
		// The other pool's cursor is its own file.
		_, err = s.CreateAndSetCursor(ctx, ctrClaim("net/1", "2001:db8:1::9", "b", "eth0"))
		require.NoError(t, err)
		wantCursor("10.1.2.20")
		if b, _ := os.ReadFile(filepath.Join(dir, "last_reserved_ip.1")); string(b) != "2001:db8:1::9" {
			t.Errorf("last_reserved_ip.1 holds %q", b)
		}
	})
}

// TestOpenRemovesTemps checks that Open removes what a writer killed mid-write
// leaves: a temporary file not yet published, and one already linked to its
// claim, which keeps the claim.
func TestOpenRemovesTemps(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	c, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "a", "eth0"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-unpublished"), []byte("b\r\neth0"), 0o600))
	require.NoError(t, os.Link(filepath.Join(dir, "10.1.2.2"), filepath.Join(dir, ".tmp-published")))

	// A claim still linked to its temporary name is read (under the lock) as
	// the claim it is.
	got, err := s.Get(ctx, c.Pool, c.IP)
	require.NoError(t, err)
	if got.Owner != c.Owner {
		t.Errorf("Get of a claim with a second link: owner %v, want %v", got.Owner, c.Owner)
	}

	open(t, dir, false)
	if names, want := dirNames(t, dir), []string{"10.1.2.2", "lock"}; !slices.Equal(names, want) {
		t.Errorf("after Open the directory holds %q, want %q", names, want)
	}
	got, err = s.Get(ctx, c.Pool, c.IP)
	require.NoError(t, err)
	if got.Owner != c.Owner {
		t.Errorf("Get after Open: owner %v, want %v", got.Owner, c.Owner)
	}
}

// TestRevisionsNeverRepeat creates, updates and deletes one address again and
// again with the same owner and time, so that inode numbers are reused at once
// and every other field is equal: no revision may come back.
func TestRevisionsNeverRepeat(t *testing.T) {
	s := open(t, t.TempDir(), false)
	ctx := t.Context()
	seen := map[int64]int{}
	c := ctrClaim("net/0", "10.1.2.2", "same", "eth0")
	record := func(i int, rev int64) {
		if j, ok := seen[rev]; ok {
			t.Fatalf("write %d got revision %d, already given to write %d", i, rev, j)
		}
		seen[rev] = i
	}
	for i := 0; i < 600; i += 3 {
		got, err := s.Create(ctx, c)
		require.NoError(t, err)
		record(i, got.Revision)
		up, err := s.Update(ctx, c, got.Revision)
		require.NoError(t, err)
		record(i+1, up.Revision)
		if err := s.Delete(ctx, c.Pool, c.IP, got.Revision); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Delete at the revision before the Update: %v, want store.ErrConflict", err)
		}
		require.NoError(t, s.Delete(ctx, c.Pool, c.IP, up.Revision))
	}
}

// TestLockHeld holds the lock as host-local does while it writes a claim file
// in two steps (create, then write), and checks that writers wait for it (or
// give up with their context), and that a reader that sees the empty file
// reads it again once the lock is released.
func TestLockHeld(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	lock, err := os.Open(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	path := filepath.Join(dir, "10.1.2.9")
	require.NoError(t, os.WriteFile(path, nil, 0o600)) // host-local's O_EXCL create

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Create(short, ctrClaim("net/0", "10.1.2.2", "a", "eth0")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create while another process holds the lock: %v, want context.DeadlineExceeded", err)
	}

	type result struct {
		c   store.Claim
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.9"))
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("Get of a file being written returned %+v, %v before the lock was released", r.c, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	require.NoError(t, os.WriteFile(path, []byte("hl\r\neth0"), 0o600)) // host-local's write
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_UN))
	r := <-got
	require.NoError(t, r.err)
	if want := (store.Owner{ContainerID: "hl", Interface: "eth0"}); r.c.Owner != want {
		t.Errorf("Get after host-local's write: owner %v, want %v", r.c.Owner, want)
	}
	// The abandoned wait released the lock it got in the end.
	if _, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "a", "eth0")); err != nil {
		t.Errorf("Create after the lock was released: %v", err)
	}
}

// TestOpenWhileLocked checks that Open does not wait for a lock another
// process holds (it only skips the clean-up of temporary files), and that the
// clean-up happens at a later Open.
func TestOpenWhileLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, false)
	tmp := filepath.Join(dir, ".tmp-leftover")
	require.NoError(t, os.WriteFile(tmp, []byte("x\r\neth0"), 0o600))
	lock, err := os.Open(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))

	done := make(chan error, 1)
	go func() {
		s, err := filestore.Open(dir, filestore.Options{Pools: testPools})
		if err == nil {
			err = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second): // for ever if it waited; 30 s for a loaded machine
		t.Fatal("Open waited for a lock another process holds")
	}
	_, err = os.Stat(tmp)
	require.NoError(t, err, "the temporary file stays while the lock is held")

	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_UN))
	open(t, dir, false)
	_, err = os.Stat(tmp)
	require.ErrorIs(t, err, os.ErrNotExist, "a later Open cleans up")
}

func TestClosed(t *testing.T) {
	s, err := filestore.Open(t.TempDir(), filestore.Options{Pools: testPools})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ctx := t.Context()
	if err := s.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close: %v, want os.ErrClosed", err)
	}
	if _, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "a", "eth0")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Create after Close: %v, want os.ErrClosed", err)
	}
	if _, err := s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.2")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Get after Close: %v, want os.ErrClosed", err)
	}
	if _, err := s.List(ctx, "net/0"); !errors.Is(err, os.ErrClosed) {
		t.Errorf("List after Close: %v, want os.ErrClosed", err)
	}
}

// benchStore opens a store of pool "net/0" (10.0.0.0/8) over a directory
// holding n claim files, written as host-local writes them, and returns it and
// the directory.
func benchStore(b *testing.B, n int) (*filestore.Store, string) {
	b.Helper()
	dir := b.TempDir()
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if err := os.WriteFile(filepath.Join(dir, ip.String()), []byte(fmt.Sprintf("ctr%d\r\neth0", i)), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	pool := filestore.Pool{Name: "net/0", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{pool}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, dir
}

// BenchmarkCreate measures Create of a free address (and the Delete that frees
// it again, so that the count stays put) in a directory already holding n
// claims: the cost must not grow with n.
func BenchmarkCreate(b *testing.B) {
	for _, n := range []int{10, 4000, 60000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			s, _ := benchStore(b, n)
			ctx := context.Background()
			c := store.Claim{Pool: "net/0", IP: netip.MustParseAddr("10.255.0.1"),
				Owner: store.Owner{ContainerID: "0123456789abcdef", Interface: "eth0"}, Time: time.Now()}
			b.ReportAllocs()
			for b.Loop() {
				got, err := s.Create(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGet measures Get of one claim among n.
func BenchmarkGet(b *testing.B) {
	for _, n := range []int{10, 4000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			s, _ := benchStore(b, n)
			ctx := context.Background()
			ip := netip.AddrFrom4([4]byte{10, 0, 0, 5})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Get(ctx, "net/0", ip); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// dirNames returns the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestTimeOutOfRange checks that a claim's time is kept exactly, as a file's
// modification time, or refused, never changed: a year the file system cannot
// hold (before 1901 or after 2446 on ext4) or that nanoseconds since 1970 in
// an int64 cannot (after 2262) came back as another time, such as 1901 or
// 1915, which garbage collection would take for an old claim.
func TestTimeOutOfRange(t *testing.T) {
	ctx := t.Context()
	s := open(t, t.TempDir(), false)
	for i, year := range []int{1800, 1969, 2100, 2300, 2500, 3000} {
		c := ctrClaim("net/0", fmt.Sprintf("10.1.2.%d", 10+i), fmt.Sprintf("ctr-%d", year), "eth0")
		c.Time = time.Date(year, time.March, 4, 5, 6, 7, 8, time.UTC)
		got, err := s.Create(ctx, c)
		if err != nil {
			if _, gerr := s.Get(ctx, c.Pool, c.IP); !errors.Is(gerr, store.ErrNotFound) {
				t.Errorf("year %d: Create failed (%v) but Get(%s) = %v, want store.ErrNotFound", year, err, c.IP, gerr)
			}
			if !strings.Contains(err.Error(), "time") {
				t.Errorf("year %d: Create's error %q does not name the time", year, err)
			}
			continue
		}
		if !got.Time.Equal(c.Time) {
			t.Errorf("year %d: Create returned time %s, want %s or an error", year, got.Time, c.Time)
		}
		if read, err := s.Get(ctx, c.Pool, c.IP); err != nil || !read.Time.Equal(c.Time) {
			t.Errorf("year %d: Get = %v, %v; want time %s", year, read.Time, err, c.Time)
		}
		// An Update to a time out of range leaves the claim as it was.
		bad := got
		bad.Time = time.Date(2500, time.January, 1, 0, 0, 0, 0, time.UTC)
		if upd, err := s.Update(ctx, bad, got.Revision); err == nil && !upd.Time.Equal(bad.Time) {
			t.Errorf("year %d: Update to 2500 returned time %s, want 2500 or an error", year, upd.Time)
		} else if err != nil {
			if read, _ := s.Get(ctx, c.Pool, c.IP); !read.Time.Equal(got.Time) || read.Revision != got.Revision {
				t.Errorf("year %d: a failed Update changed the claim to %+v, want %+v", year, read, got)
			}
		}
	}
}
