//go:build linux

package filestore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// logBuf is a slog handler's output, safe for concurrent writes.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rebuilds counts the rebuilds logged.
func (b *logBuf) rebuilds() int { return strings.Count(b.String(), "owner index rebuilt") }

// openLogged opens dir with testPools, its log kept in the returned buffer.
func openLogged(t testing.TB, dir string, durable bool) (*filestore.Store, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s, err := filestore.Open(dir, filestore.Options{Pools: testPools, Sync: durable,
		Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, lb
}

// hostLocalReserve does what host-local v1.9.1's disk store does to reserve
// ip for content under range set index: under the flock of the directory's
// lock file, create the file O_EXCL, write it, then truncate and write
// last_reserved_ip.<index>.
func hostLocalReserve(t testing.TB, dir, ip, content string, index int) {
	t.Helper()
	withLock(t, dir, func() {
		f, err := os.OpenFile(filepath.Join(dir, ip), os.O_RDWR|os.O_EXCL|os.O_CREATE, 0o600)
		require.NoError(t, err)
		_, err = f.WriteString(content)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "last_reserved_ip."+strconv.Itoa(index)), []byte(ip), 0o600))
	})
}

// hostLocalRelease removes, under the flock, the files that hold content, as
// host-local's ReleaseByID does.
func hostLocalRelease(t testing.TB, dir, content string) {
	t.Helper()
	withLock(t, dir, func() {
		for _, name := range dirNames(t.(*testing.T), dir) {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && strings.TrimSpace(string(b)) == content {
				require.NoError(t, os.Remove(filepath.Join(dir, name)))
			}
		}
	})
}

// withLock runs f holding the flock of dir's lock file, as host-local does.
func withLock(t testing.TB, dir string, f func()) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o750)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	f()
}

// truth returns, for each container, its claims in testPools as List has them.
func truth(t *testing.T, s *filestore.Store) map[string][]store.Claim {
	t.Helper()
	out := map[string][]store.Claim{}
	for _, p := range testPools {
		cs, err := s.List(t.Context(), p.Name)
		require.NoError(t, err)
		for _, c := range cs {
			out[c.Owner.ContainerID] = append(out[c.Owner.ContainerID], c)
		}
	}
	return out
}

var cmpClaims = cmp.Options{cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmpopts.SortSlices(func(a, b store.Claim) bool { return a.IP.Less(b.IP) }), cmpopts.EquateEmpty()}

// wantOwned checks that Owned of each of ids equals what List holds.
func wantOwned(t *testing.T, s *filestore.Store, ids ...string) {
	t.Helper()
	all := truth(t, s)
	for _, id := range ids {
		got, err := s.Owned(t.Context(), store.ByContainer(id))
		require.NoError(t, err)
		if diff := cmp.Diff(all[id], got, cmpClaims); diff != "" {
			t.Errorf("Owned(container %q) (-List +Owned):\n%s", id, diff)
		}
	}
}

// indexEntries returns the owner index's entries, name to link target, and
// what else it holds but directories.
func indexEntries(t *testing.T, s *filestore.Store) map[string]string {
	t.Helper()
	dir := filestore.IndexDir(s)
	out := map[string]string{}
	for _, name := range dirNames(t, dir) {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && fi.IsDir() {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, name))
		if err != nil {
			target = "not a link: " + err.Error()
		}
		out[name] = target
	}
	return out
}

// wantIndex checks that the index holds exactly one entry per container with
// claims, listing its addresses (in any order), and a state.
func wantIndex(t *testing.T, s *filestore.Store) {
	t.Helper()
	want := map[string][]string{}
	for id, cs := range truth(t, s) {
		for _, c := range cs {
			want[entryName(id)] = append(want[entryName(id)], c.IP.String())
		}
	}
	got := map[string][]string{}
	for name, target := range indexEntries(t, s) {
		if name == ".state" {
			continue
		}
		got[name] = strings.Split(target, ",")
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("owner index entries (-want +got):\n%s", diff)
	}
}

// entryName is the name of a container's index entry.
func entryName(id string) string {
	if len(id) <= 128 && regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`).MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "_" + hex.EncodeToString(sum[:])
}

// stateRE matches the index's state.
var stateRE = regexp.MustCompile(`^ipam-owner-index/1 boot=(\S*) dir=(\d+):(\d+) index=(\d+) mtime=(\d+),(\d+)$`)

// restoreMarks sets the modification times that state records back on the
// network directory dir and s's index directory, as if nothing had changed
// them: a test that damages the index on purpose then exercises what reading
// it finds, not the marks.
func restoreMarks(t *testing.T, s *filestore.Store, dir, state string) {
	t.Helper()
	m := stateRE.FindStringSubmatch(state)
	require.NotNil(t, m, "state %q", state)
	netNs, _ := strconv.ParseInt(m[5], 10, 64)
	idxNs, _ := strconv.ParseInt(m[6], 10, 64)
	require.NoError(t, os.Chtimes(dir, time.Time{}, time.Unix(0, netNs)))
	require.NoError(t, os.Chtimes(filestore.IndexDir(s), time.Time{}, time.Unix(0, idxNs)))
}

// TestIndexLayout checks where the owner index lives and what it holds: one
// symbolic link per container, named by the ID (or its hash), listing its
// addresses; a state; both directories marked with the times it records; and
// nothing in the network directory.
func TestIndexLayout(t *testing.T) {
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "mynet")
	s, logs := openLogged(t, dir, false)
	ctx := t.Context()
	idx := filepath.Join(dataDir, ".ipam-owners", "mynet")
	require.Equal(t, idx, filestore.IndexDir(s))

	ctr := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	mk := func(pool, ip, id, iface string) store.Claim {
		c, err := s.Create(ctx, ctrClaim(pool, ip, id, iface))
		require.NoError(t, err)
		return c
	}
	v4 := mk("net/0", "10.1.2.2", ctr, "eth0")
	mk("net/1", "2001:db8:1::2", ctr, "eth0")
	mk("net/0", "10.1.2.3", ctr, "net1")
	mk("net/0", "10.1.2.4", "odd/id", "eth0")
	mk("net/0", "10.1.2.5", "legacy", "")

	entries := indexEntries(t, s)
	state := entries[".state"]
	delete(entries, ".state")
	sum := sha256.Sum256([]byte("odd/id"))
	want := map[string]string{
		ctr:                              "10.1.2.2,10.1.2.3,2001:db8:1::2",
		"_" + hex.EncodeToString(sum[:]): "10.1.2.4",
		"legacy":                         "10.1.2.5",
	}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("index entries (-want +got):\n%s", diff)
	}
	m := stateRE.FindStringSubmatch(state)
	require.NotNil(t, m, "state %q", state)
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if m[1] != strings.TrimSpace(string(boot)) {
		t.Errorf("state names boot %q, want %q", m[1], boot)
	}
	for i, d := range []string{dir, idx} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		ns, _ := strconv.ParseInt(m[5+i], 10, 64)
		if !fi.ModTime().Equal(time.Unix(0, ns)) || fi.ModTime().Year() != 2001 {
			t.Errorf("%s modified %v, want the mark %v in 2001", d, fi.ModTime(), time.Unix(0, ns))
		}
	}
	if got := fileMode(t, idx); got != os.ModeDir|0o700 {
		t.Errorf("index directory mode %v, want drwx------", got)
	}

	// Releases shorten the list, then remove the entry.
	require.NoError(t, s.Delete(ctx, v4.Pool, v4.IP, v4.Revision))
	if got := indexEntries(t, s)[ctr]; got != "10.1.2.3,2001:db8:1::2" {
		t.Errorf("after a Delete the entry holds %q", got)
	}
	for _, c := range truth(t, s)[ctr] {
		require.NoError(t, s.Delete(ctx, c.Pool, c.IP, c.Revision))
	}
	if _, ok := indexEntries(t, s)[ctr]; ok {
		t.Error("the entry of a container that holds nothing is left")
	}
	wantIndex(t, s)
	if n := logs.rebuilds(); n != 1 {
		t.Errorf("%d rebuilds, want 1 (the first Open's):\n%s", n, logs)
	}
}

// TestOwnedReadsOnlyTheContainers checks that Owned and CreateExclusive read
// the claim files of the container asked about and no other, in a directory
// of 1,000 claims: nothing for a new container, as in the common CNI ADD.
func TestOwnedReadsOnlyTheContainers(t *testing.T) {
	dir := t.TempDir()
	for i := range 250 { // 1,000 claims: one IPv4 and three IPv6 each
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("10.1.2.%d", i+1)), []byte(fmt.Sprintf("ctr%d\r\neth0", i)), 0o600))
		for j := 1; j <= 3; j++ {
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("2001:db8:1::%x:%x", j, i)), []byte(fmt.Sprintf("ctr%d\r\nnet%d", i, j)), 0o600))
		}
	}
	s, _ := openLogged(t, dir, false) // builds the index: reads all
	var reads atomic.Int64
	filestore.SetHook(s, func(step string) {
		if step == filestore.StepRead {
			reads.Add(1)
		}
	})
	ctx := t.Context()
	count := func(what string, want int64, f func() error) {
		t.Helper()
		reads.Store(0)
		require.NoError(t, f())
		if n := reads.Load(); n != want {
			t.Errorf("%s read %d files, want %d", what, n, want)
		}
	}
	count("Owned of a new container", 0, func() error {
		got, err := s.Owned(ctx, store.ByContainer("new").On("eth0"))
		if len(got) != 0 {
			t.Errorf("Owned of a new container = %v", got)
		}
		return err
	})
	count("CreateExclusive for a new container", 0, func() error {
		_, err := s.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.255", "new", "eth0"))
		return err
	})
	count("Owned of a container with 4 claims", 4, func() error {
		got, err := s.Owned(ctx, store.ByContainer("ctr7"))
		if len(got) != 4 {
			t.Errorf("Owned(ctr7) = %d claims, want 4", len(got))
		}
		return err
	})
	count("CreateExclusive for it on eth0, refused", 4, func() error {
		_, err := s.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.254", "ctr7", "eth0"))
		if !errors.Is(err, store.ErrHeld) {
			return fmt.Errorf("CreateExclusive: %v, want store.ErrHeld", err)
		}
		return nil
	})
}

// TestIndexSeesForeignWrites has host-local's disk store (its exact system
// calls, under the lock) reserve and release addresses right after this
// package's writes, within one tick of the clock as a rule, and followed by
// writes of this package's that need no index (a Create, a SetCursor): every
// claim host-local makes is found by Owned and stops CreateExclusive; every
// one it releases is gone. An index that compared directory times would miss
// the writes that fall in the tick of its own; one that trusted itself after
// any write of its own would miss the writes before it.
func TestIndexSeesForeignWrites(t *testing.T) {
	syncModes(t, func(t *testing.T, durable bool) {
		dir := t.TempDir()
		s, _ := openLogged(t, dir, durable)
		other, logs := openLogged(t, dir, durable)
		ctx := t.Context()
		rounds := 200
		if durable {
			rounds = 40
		}
		for i := range rounds {
			ours := fmt.Sprintf("ours%d", i)
			theirs := fmt.Sprintf("theirs%d", i)
			_, err := s.CreateAndSetCursor(ctx, ctrClaim("net/0", fmt.Sprintf("10.1.2.%d", i%100+1), ours, "eth0"))
			require.NoError(t, err)
			hostLocalReserve(t, dir, fmt.Sprintf("10.1.2.%d", i%100+101), theirs+"\r\neth0", 0)
			if i%2 == 0 {
				_, err = s.Create(ctx, ctrClaim("net/1", fmt.Sprintf("2001:db8:1::%x", i+1), ours, "eth0"))
			} else {
				err = s.SetCursor(ctx, "net/1", netip.MustParseAddr("2001:db8:1::ffff"))
			}
			require.NoError(t, err)
			got, err := other.Owned(ctx, store.ByContainer(theirs))
			require.NoError(t, err)
			if len(got) != 1 {
				t.Fatalf("round %d: Owned(%s) after host-local's reserve = %v, want its claim", i, theirs, got)
			}
			_, err = s.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.250", theirs, "eth0"))
			if !errors.Is(err, store.ErrHeld) {
				t.Fatalf("round %d: CreateExclusive for %s: %v, want store.ErrHeld", i, theirs, err)
			}
			hostLocalRelease(t, dir, ours+"\r\neth0")
			hostLocalRelease(t, dir, theirs+"\r\neth0")
			got, err = s.Owned(ctx, store.ByContainer(theirs))
			require.NoError(t, err)
			if len(got) != 0 {
				t.Fatalf("round %d: Owned(%s) after host-local's release = %v, want none", i, theirs, got)
			}
			got, err = other.Owned(ctx, store.ByContainer(ours))
			require.NoError(t, err)
			if len(got) != 0 {
				t.Fatalf("round %d: Owned(%s) after host-local's release = %v, want none", i, ours, got)
			}
		}
		wantIndex(t, s)
		t.Logf("%d rebuilds in %d rounds by the Store that asks after host-local's writes", logs.rebuilds(), rounds)
	})
}

// TestIndexDamaged damages the index in each way, and checks that Owned
// still answers what the claim files say, rebuilding the index (and naming
// the damaged file in the log where it finds one), and that the index is
// whole again afterwards.
func TestIndexDamaged(t *testing.T) {
	tests := []struct {
		name string
		// damage damages the index of s, whose network directory is dir;
		// restore sets the directories' marks back as they were before.
		damage func(t *testing.T, s *filestore.Store, dir string, restore func())
		// logged is what the log must say, with %[1]s the index directory
		// and %[2]s the network directory.
		logged string
	}{
		{"state missing", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			require.NoError(t, os.Remove(filepath.Join(filestore.IndexDir(s), ".state")))
		}, "there is no index yet (%[1]s/.state is missing)"},
		{"state a regular file, marks kept", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			replaceFile(t, filepath.Join(filestore.IndexDir(s), ".state"), "x")
			restore()
		}, `msg="filestore: owner index state is not a symbolic link; rebuilding" file=%[1]s/.state`},
		{"state garbage, marks kept", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			replaceLink(t, filepath.Join(filestore.IndexDir(s), ".state"), "ipam-owner-index/1 garbage")
			restore()
		}, `msg="filestore: owner index state is corrupt; rebuilding" file=%[1]s/.state problem="target \"ipam-owner-index/1 garbage\" is not ipam-owner-index/1 state"`},
		{"entry removed", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			require.NoError(t, os.Remove(filepath.Join(filestore.IndexDir(s), "a")))
		}, "the index directory changed since the index was last brought up to date"},
		{"entry a regular file, marks kept", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			replaceFile(t, filepath.Join(filestore.IndexDir(s), "a"), "10.1.2.2")
			restore()
		}, `msg="filestore: owner index entry is corrupt; rebuilding the index" file=%[1]s/a problem="not a symbolic link"`},
		{"entry garbage, marks kept", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			replaceLink(t, filepath.Join(filestore.IndexDir(s), "a"), "10.1.2.2,bogus")
			restore()
		}, `msg="filestore: owner index entry is corrupt; rebuilding the index" file=%[1]s/a problem="target \"10.1.2.2,bogus\": \"bogus\" is not an address in canonical form"`},
		{"entry lists another's address, marks kept", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			replaceLink(t, filepath.Join(filestore.IndexDir(s), "a"), "10.1.2.2,2001:db8:1::2,10.1.2.4")
			restore()
		}, ""},
		{"index directory removed", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			require.NoError(t, os.RemoveAll(filestore.IndexDir(s)))
		}, "there is no index yet"},
		{"network directory removed and made again", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			// The usual cure for host-local's leaked files; host-local
			// makes the directory again at its next call.
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.Mkdir(dir, 0o755))
			hostLocalReserve(t, dir, "10.1.2.20", "a\r\neth0", 0)
			hostLocalReserve(t, dir, "10.1.2.21", "b\r\nnet1", 0)
		}, "the network directory " + "%[2]s was removed or replaced"},
		{"temporary files left", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			require.NoError(t, os.Symlink("10.1.2.9", filepath.Join(filestore.IndexDir(s), ".tmp-left")))
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-left"), []byte("a\r\neth0"), 0o600))
		}, "the network directory changed since the index was last brought up to date"},
		{"a directory in the index directory", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			require.NoError(t, os.Mkdir(filepath.Join(filestore.IndexDir(s), "stray"), 0o700))
		}, `msg="filestore: the owner index directory holds something that is no entry; leaving it" file=%[1]s/stray`},
		{"another boot", func(t *testing.T, s *filestore.Store, dir string, restore func()) {
			other := stateRE.ReplaceAllString(readState(t, s), "ipam-owner-index/1 boot=00000000-0000-0000-0000-000000000000 dir=$2:$3 index=$4 mtime=$5,$6")
			replaceLink(t, filepath.Join(filestore.IndexDir(s), ".state"), other)
			restore()
		}, `the index was built in another boot (\"00000000-0000-0000-0000-000000000000\"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net")
			s, _ := openLogged(t, dir, false)
			ctx := t.Context()
			for _, c := range []store.Claim{
				ctrClaim("net/0", "10.1.2.2", "a", "eth0"), ctrClaim("net/1", "2001:db8:1::2", "a", "eth0"),
				ctrClaim("net/0", "10.1.2.3", "b", "eth0"), ctrClaim("net/0", "10.1.2.4", "legacy", ""),
			} {
				_, err := s.Create(ctx, c)
				require.NoError(t, err)
			}
			marks := readState(t, s)
			tc.damage(t, s, dir, func() { restoreMarks(t, s, dir, marks) })
			reader, logs := openLogged(t, dir, false)
			wantOwned(t, reader, "a", "b", "legacy", "nobody")
			wantOwned(t, s, "a", "b", "legacy")
			want := tc.logged
			if strings.Contains(want, "%") {
				want = fmt.Sprintf(want, filestore.IndexDir(s), dir)
			}
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log does not say %q:\n%s", want, logs)
			}
			wantIndex(t, reader)
			for _, d := range []string{dir, filestore.IndexDir(s)} {
				for _, name := range dirNames(t, d) {
					if strings.HasPrefix(name, ".tmp-") {
						t.Errorf("%s left in %s", name, d)
					}
				}
			}
			// Whole again: no further rebuild.
			n := logs.rebuilds()
			wantOwned(t, reader, "a", "b", "legacy")
			_, err := reader.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.9", "c", "eth0"))
			require.NoError(t, err)
			if logs.rebuilds() != n {
				t.Errorf("the index was rebuilt again:\n%s", logs)
			}
		})
	}
}

// replaceFile replaces path with a regular file holding content.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// replaceLink replaces path with a symbolic link to target.
func replaceLink(t *testing.T, path, target string) {
	t.Helper()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(target, path))
}

// readState returns the index's state.
func readState(t *testing.T, s *filestore.Store) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(filestore.IndexDir(s), ".state"))
	require.NoError(t, err)
	return target
}

// TestIndexLegacyClaim checks that a claim in host-local's legacy form,
// which names no interface, is found for every interface of its container
// and stops CreateExclusive of its family on any interface.
func TestIndexLegacyClaim(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	hostLocalReserve(t, dir, "10.1.2.7", "old-ctr\n", 0) // written before September 2018
	for _, q := range []store.OwnerQuery{store.ByContainer("old-ctr"), store.ByContainer("old-ctr").On("eth0"), store.ByContainer("old-ctr").On("net1")} {
		got, err := s.Owned(ctx, q)
		require.NoError(t, err)
		if len(got) != 1 || got[0].IP != netip.MustParseAddr("10.1.2.7") || got[0].Owner != (store.Owner{ContainerID: "old-ctr"}) {
			t.Errorf("Owned(%s) = %+v, want the legacy claim", q, got)
		}
	}
	for _, iface := range []string{"eth0", "net1", ""} {
		_, err := s.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.8", "old-ctr", iface))
		var he *store.HeldError
		if !errors.As(err, &he) || len(he.Held) != 1 || he.Held[0].IP != netip.MustParseAddr("10.1.2.7") {
			t.Errorf("CreateExclusive on %q: %v, want a HeldError for the legacy claim", iface, err)
		}
	}
	_, err := s.CreateExclusive(ctx, ctrClaim("net/1", "2001:db8:1::8", "old-ctr", "eth0"))
	require.NoError(t, err, "the other family")
}

// TestIndexOverflow gives one container more addresses than an entry lists:
// its entry says so, Owned reads every claim file for it, and once it holds
// few again the entry lists them.
func TestIndexOverflow(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	var made []store.Claim
	for i := range 220 {
		c, err := s.Create(ctx, ctrClaim("net/1", fmt.Sprintf("2001:db8:1::ffff:%x", i), "big", "eth0"))
		require.NoError(t, err)
		made = append(made, c)
	}
	if got := indexEntries(t, s)["big"]; got != "*" {
		t.Errorf("entry of a container with 220 addresses: %.40q, want %q", got, "*")
	}
	wantOwned(t, s, "big")
	for _, c := range made[3:] {
		require.NoError(t, s.Delete(ctx, c.Pool, c.IP, c.Revision))
	}
	wantOwned(t, s, "big")
	if got := indexEntries(t, s)["big"]; got != "2001:db8:1::ffff:0,2001:db8:1::ffff:1,2001:db8:1::ffff:2" {
		t.Errorf("entry once it holds 3: %q", got)
	}
}

// TestIndexDirOption checks where the index goes: next to the network
// directory (its real place, through symbolic links), or Options.IndexDir,
// never inside the network directory.
func TestIndexDirOption(t *testing.T) {
	dataDir := t.TempDir()
	real := filepath.Join(dataDir, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	require.NoError(t, os.Symlink(real, filepath.Join(dataDir, "alias")))
	a, logs := openLogged(t, filepath.Join(dataDir, "alias"), false)
	b, _ := openLogged(t, real, false)
	require.Equal(t, filepath.Join(dataDir, ".ipam-owners", "real"), filestore.IndexDir(a))
	require.Equal(t, filestore.IndexDir(a), filestore.IndexDir(b))
	ctx := t.Context()
	_, err := a.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.2", "x", "eth0"))
	require.NoError(t, err)
	_, err = b.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.3", "x", "eth0"))
	require.ErrorIs(t, err, store.ErrHeld)
	wantOwned(t, a, "x")
	if n := logs.rebuilds(); n != 1 {
		t.Errorf("%d rebuilds, want only the first Open's:\n%s", n, logs)
	}

	custom := filepath.Join(t.TempDir(), "elsewhere")
	s, err := filestore.Open(filepath.Join(dataDir, "n2"), filestore.Options{Pools: testPools, IndexDir: custom})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "y", "eth0"))
	require.NoError(t, err)
	if target, err := os.Readlink(filepath.Join(custom, "y")); err != nil || target != "10.1.2.2" {
		t.Errorf("entry in Options.IndexDir: %q, %v", target, err)
	}

	for _, idx := range []string{filepath.Join(dataDir, "n3"), filepath.Join(dataDir, "n3", "index")} {
		_, err := filestore.Open(filepath.Join(dataDir, "n3"), filestore.Options{Pools: testPools, IndexDir: idx})
		if err == nil || !strings.Contains(err.Error(), "is inside the network directory") {
			t.Errorf("Open with IndexDir %s: %v, want an error", idx, err)
		}
	}
}

// TestListUnderLock checks that List reads under the lock: while another
// process holds it and removes one claim and creates another, List waits, and
// then returns the second only, never both.
func TestListUnderLock(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, false)
	ctx := t.Context()
	_, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "a", "eth0"))
	require.NoError(t, err)
	got := make(chan []store.Claim, 1)
	withLock(t, dir, func() {
		go func() {
			cs, err := s.List(ctx, "net/0")
			if err != nil {
				t.Error(err)
			}
			got <- cs
		}()
		select {
		case cs := <-got:
			t.Fatalf("List returned %v while another process held the lock", cs)
		case <-time.After(50 * time.Millisecond):
		}
		require.NoError(t, os.Remove(filepath.Join(dir, "10.1.2.2")))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "10.1.2.250"), []byte("b\r\neth0"), 0o600))
	})
	if cs := <-got; len(cs) != 1 || cs[0].IP != netip.MustParseAddr("10.1.2.250") {
		t.Errorf("List = %v, want 10.1.2.250 only", cs)
	}
}

// TestOwnedWhileRecreated has one instance delete and create again, over and
// over, one address of a container (alternately for it and for another),
// while another instance asks for both containers' claims without pause: its
// answers always hold the claim the first container keeps throughout, never
// an address for a container that does not hold it, and only claims at
// revisions the writer made for that container.
func TestOwnedWhileRecreated(t *testing.T) {
	dir := t.TempDir()
	writer, reader := open(t, dir, false), open(t, dir, false)
	ctx := t.Context()
	kept, err := writer.Create(ctx, ctrClaim("net/0", "10.1.2.100", "o", "eth0"))
	require.NoError(t, err)
	var made sync.Map // revision: container
	made.Store(kept.Revision, "o")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 400 {
			id := []string{"o", "p"}[i%2]
			c, err := writer.Create(ctx, ctrClaim("net/0", "10.1.2.2", id, "eth0"))
			if err != nil {
				t.Error(err)
				return
			}
			made.Store(c.Revision, id)
			if err := writer.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	seen := map[int64]string{} // revision: the container Owned returned it for
	asks := 0
	for running := true; running; asks++ {
		select {
		case <-done:
			running = false
		default:
		}
		for _, id := range []string{"o", "p"} {
			got, err := reader.Owned(ctx, store.ByContainer(id))
			require.NoError(t, err)
			sawKept := false
			for _, c := range got {
				seen[c.Revision] = id
				switch {
				case c.Owner.ContainerID != id:
					t.Fatalf("Owned(%s) returned %s of %v", id, c.Key(), c.Owner)
				case c.IP == kept.IP && c.Revision == kept.Revision:
					sawKept = true
				case c.IP != netip.MustParseAddr("10.1.2.2"):
					t.Fatalf("Owned(%s) returned %s", id, c.Key())
				}
			}
			if id == "o" && !sawKept {
				t.Fatalf("Owned(o) = %v, without the claim it holds throughout", got)
			}
		}
	}
	// Every claim returned was one the writer made, for that container (the
	// writer records it once Create has returned, so only now).
	for rev, id := range seen {
		if by, ok := made.Load(rev); !ok || by != id {
			t.Errorf("Owned(%s) returned revision %d, which the writer made for %v", id, rev, by)
		}
	}
	t.Logf("%d rounds of questions, %d claims seen", asks, len(seen))
	wantOwned(t, reader, "o", "p")
	wantIndex(t, reader)
}

// TestExclusiveProcessRace has several processes serve the same containers
// at once with CreateExclusive, each at an address of its own: exactly one
// process wins each container, and each container holds one claim.
func TestExclusiveProcessRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const containers = 40
	winners := race(t, "exclusive", dir, false, containers)
	s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{procPool}})
	require.NoError(t, err)
	defer s.Close()
	for i := range containers {
		ctr := fmt.Sprintf("ctr-%d", i)
		if len(winners[ctr]) != 1 {
			t.Errorf("%s won by %q, want exactly one process", ctr, winners[ctr])
		}
		got, err := s.Owned(t.Context(), store.ByContainer(ctr))
		require.NoError(t, err)
		if len(got) != 1 {
			t.Errorf("%s holds %v, want one claim", ctr, got)
		}
	}
}

// crashScenario is a write that TestIndexCrash stops at each of its steps:
// prepare runs in the test with its own Store, run in the helper process.
type crashScenario struct {
	prepare func(t *testing.T, s *filestore.Store, dir string)
	run     func(ctx context.Context, s *filestore.Store, dir string) error
}

// mustCreate creates claims for prepare.
func mustCreate(t *testing.T, s *filestore.Store, cs ...store.Claim) {
	t.Helper()
	for _, c := range cs {
		_, err := s.Create(t.Context(), c)
		require.NoError(t, err)
	}
}

// deleteOf returns a run that deletes the claim of ip in pool.
func deleteOf(pool, ip string) func(context.Context, *filestore.Store, string) error {
	return func(ctx context.Context, s *filestore.Store, _ string) error {
		c, err := s.Get(ctx, pool, netip.MustParseAddr(ip))
		if err != nil {
			return err
		}
		return s.Delete(ctx, c.Pool, c.IP, c.Revision)
	}
}

// crashScenarios are TestIndexCrash's writes, by name.
var crashScenarios = map[string]crashScenario{
	"create-new": {
		run: func(ctx context.Context, s *filestore.Store, _ string) error {
			_, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.10", "n", "eth0"))
			return err
		},
	},
	"create-second": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/0", "10.1.2.2", "a", "eth0"))
		},
		run: func(ctx context.Context, s *filestore.Store, _ string) error {
			_, err := s.CreateAndSetCursor(ctx, ctrClaim("net/1", "2001:db8:1::2", "a", "eth0"))
			return err
		},
	},
	"exclusive": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/1", "2001:db8:1::11", "x", "eth0"))
		},
		run: func(ctx context.Context, s *filestore.Store, _ string) error {
			_, err := s.CreateExclusive(ctx, ctrClaim("net/0", "10.1.2.11", "x", "eth0"))
			return err
		},
	},
	"delete-one": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/0", "10.1.2.3", "d", "eth0"), ctrClaim("net/1", "2001:db8:1::3", "d", "eth0"))
		},
		run: deleteOf("net/0", "10.1.2.3"),
	},
	"delete-last": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/0", "10.1.2.4", "e", "eth0"))
		},
		run: deleteOf("net/0", "10.1.2.4"),
	},
	"update": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/0", "10.1.2.5", "u", "eth0"), ctrClaim("net/0", "10.1.2.6", "v", "eth0"))
		},
		run: func(ctx context.Context, s *filestore.Store, _ string) error {
			c, err := s.Get(ctx, "net/0", netip.MustParseAddr("10.1.2.5"))
			if err != nil {
				return err
			}
			c.Owner = store.Owner{ContainerID: "v", Interface: "net1"}
			_, err = s.Update(ctx, c, c.Revision)
			return err
		},
	},
	"rebuild": {
		prepare: func(t *testing.T, s *filestore.Store, _ string) {
			mustCreate(t, s, ctrClaim("net/0", "10.1.2.7", "f", "eth0"), ctrClaim("net/0", "10.1.2.8", "g", "eth0"))
		},
		run: func(ctx context.Context, s *filestore.Store, dir string) error {
			// host-local reserves an address; the next Owned rebuilds.
			if err := os.WriteFile(filepath.Join(dir, "10.1.2.9"), []byte("f\r\nnet1"), 0o600); err != nil {
				return err
			}
			_, err := s.Owned(ctx, store.ByContainer("f"))
			return err
		},
	},
}

// crashOwners are the containers of the scenarios.
var crashOwners = []string{"n", "a", "x", "d", "e", "u", "v", "f", "g"}

// TestIndexCrash kills a process at each step of each kind of write, and
// checks that what it leaves is read right: the claim file is as before or
// as after the write; Owned of every container equals what List holds; the
// index, once a Store has opened the directory, has an entry for every
// container with claims, listing exactly its addresses, and no temporary
// file is left in either directory.
func TestIndexCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	reached := map[string]bool{}
	syncModes(t, func(t *testing.T, durable bool) {
		for _, name := range slices.Sorted(mapKeys(crashScenarios)) {
			sc := crashScenarios[name]
			for _, step := range filestore.Steps {
				t.Run(name+"/"+step, func(t *testing.T) {
					dir := filepath.Join(t.TempDir(), "net")
					s := open(t, dir, durable)
					if sc.prepare != nil {
						sc.prepare(t, s, dir)
					}
					before := truth(t, s)
					out, err := stepHelper(t.Context(), t, "step", dir, name, durable, 0, step).Output()
					var exit *exec.ExitError
					switch {
					case err == nil && strings.TrimSpace(string(out)) == "done":
						t.Skipf("%s does not reach %q", name, step)
					case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
						reached[step] = true
					default:
						t.Fatalf("helper: %v, output %q", err, out)
					}
					after, logs := openLogged(t, dir, durable)
					now := truth(t, after)
					for _, id := range crashOwners {
						if len(now[id]) != len(before[id]) && len(now[id]) != len(before[id])+1 && len(now[id]) != len(before[id])-1 {
							t.Errorf("container %s held %d claims, now %d", id, len(before[id]), len(now[id]))
						}
					}
					wantOwned(t, after, crashOwners...)
					wantIndex(t, after)
					for _, d := range []string{dir, filestore.IndexDir(after)} {
						for _, n := range dirNames(t, d) {
							if strings.HasPrefix(n, ".tmp-") {
								t.Errorf("%s left in %s", n, d)
							}
						}
					}
					t.Logf("rebuilds after the kill: %d", logs.rebuilds())
				})
			}
		}
	})
	for _, step := range filestore.Steps {
		if !reached[step] {
			t.Errorf("no scenario was killed at %q", step)
		}
	}
}

// mapKeys yields the keys of m.
func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestIndexProgress: a rebuild of the owner index tells Options.Progress how
// it goes, every filestore.ProgressEvery claim files read and owners
// written, the owners of a known total.
func TestIndexProgress(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net")
	require.NoError(t, os.Mkdir(dir, 0o755))
	const files, owners = 2100, 2050
	for i := range files {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		content := fmt.Sprintf("c%d\r\neth%d", i%owners, i/owners)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ip.String()), []byte(content), 0o600))
	}
	var got []string
	s, err := filestore.Open(dir, filestore.Options{Pools: testPools, Progress: func(done, total int, what string) {
		got = append(got, fmt.Sprintf("%d/%d %s", done, total, what))
	}})
	require.NoError(t, err)
	defer s.Close()
	// The directory holds the claim files and the lock file: 2101 names.
	want := []string{"1024/0 claim files", "2048/0 claim files", "1024/2050 owners", "2048/2050 owners"}
	if !slices.Equal(got, want) {
		t.Errorf("progress %q, want %q", got, want)
	}
}
