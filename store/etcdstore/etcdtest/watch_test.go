package etcdtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

// recorder is a store.WatchHandler that keeps the view a reader builds from
// what a Watcher reports, and everything it reported.
type recorder struct {
	mu     sync.Mutex
	resets [][]store.Claim
	events []store.Event
	view   map[string]store.Claim // by Claim.Key
}

func (r *recorder) Reset(claims []store.Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, slices.Clone(claims))
	r.view = map[string]store.Claim{}
	for _, c := range claims {
		r.view[c.Key()] = c
	}
}

func (r *recorder) Apply(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if e.Deleted {
		delete(r.view, e.Claim.Key())
	} else {
		r.view[e.Claim.Key()] = e.Claim
	}
}

// snapshot returns copies of what r holds.
func (r *recorder) snapshot() (resets int, events []store.Event, view map[string]store.Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.resets), slices.Clone(r.events), maps.Clone(r.view)
}

// watch runs s.Watch(h) until t ends, and checks that it then returns
// context.Canceled and not earlier.
func watch(t *testing.T, s store.Watcher, h store.WatchHandler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return 10 s after its context was canceled")
		}
	})
	go func() {
		select {
		case err := <-done:
			t.Errorf("Watch returned %v before its context was canceled", err)
			done <- err
		case <-ctx.Done():
		}
	}()
}

// eventually waits up to 20 s for cond to hold, polling.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// state returns every claim of pools, by key, as List reads them.
func state(t *testing.T, s store.Store, pools ...string) map[string]store.Claim {
	t.Helper()
	m := map[string]store.Claim{}
	for _, p := range pools {
		cs, err := s.List(t.Context(), p)
		if err != nil {
			t.Fatalf("List(%s): %v", p, err)
		}
		for _, c := range cs {
			m[c.Key()] = c
		}
	}
	return m
}

// viewIs waits until r's view equals want.
func viewIs(t *testing.T, r *recorder, want map[string]store.Claim) {
	t.Helper()
	var diff string
	eventually(t, "the watcher's view differs from the store's", func() bool {
		_, _, view := r.snapshot()
		diff = cmp.Diff(want, view, cmpClaims)
		return diff == ""
	})
	if diff != "" {
		t.Fatalf("view (-store +watcher):\n%s", diff)
	}
}

// cmpClaims compares claims: addresses by value, times as instants.
var cmpClaims = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
}

// byKey orders claim slices by pool and address, for comparison.
var byKey = cmpopts.SortSlices(func(a, b store.Claim) bool {
	return a.Pool < b.Pool || a.Pool == b.Pool && a.IP.Less(b.IP)
})

var watchTime = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// claimOf returns a claim of ip in pool by the owner named id.
func claimOf(pool, ip, id string) store.Claim {
	return store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Time: watchTime,
		Owner: store.Owner{Namespace: "ns", Name: id, UID: "uid-" + id, ContainerID: "ctr-" + id, Interface: "eth0"}}
}

// rawClient returns an etcd client of the cluster's endpoints, closed when t
// ends.
func rawClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// compact compacts the cluster's history up to its current revision.
func compact(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	resp, err := cli.Get(t.Context(), "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact at %d: %v", resp.Header.Revision, err)
	}
}

// The watcher reports the claims that exist, then every change, in order,
// exactly as the writes returned them; cursors are not claims; a compaction
// of history it has already followed changes nothing.
func TestWatchFollows(t *testing.T) {
	prefix := newPrefix(t)
	w, s := open(t, single, prefix), open(t, single, prefix)
	ctx := t.Context()
	must := func(c store.Claim, err error) store.Claim {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := []store.Claim{
		must(s.Create(ctx, claimOf("blue", "10.0.0.1", "a"))),
		must(s.Create(ctx, claimOf("green", "2001:db8::1", "b"))),
		must(s.Create(ctx, claimOf("blue-2", "10.0.0.1", "c"))),
	}
	// A claim under another prefix is not the watcher's.
	must(open(t, single, prefix+"other/").Create(ctx, claimOf("blue", "10.0.0.9", "x")))

	r := &recorder{}
	watch(t, w, r)
	eventually(t, "no Reset", func() bool { n, _, _ := r.snapshot(); return n == 1 })
	if diff := cmp.Diff(before, r.resets[0], cmpClaims, byKey); diff != "" {
		t.Fatalf("Reset (-want +got):\n%s", diff)
	}

	var want []store.Event
	put := func(c store.Claim) store.Claim {
		want = append(want, store.Event{Claim: c})
		return c
	}
	d := put(must(s.CreateAndSetCursor(ctx, claimOf("blue", "10.0.0.2", "d"))))
	put(must(s.CreateExclusive(ctx, claimOf("green", "10.1.0.1", "e"))))
	if err := s.SetCursor(ctx, "blue", netip.MustParseAddr("10.0.0.7")); err != nil {
		t.Fatal(err)
	}
	moved := d
	moved.Owner = claimOf("", "10.0.0.2", "f").Owner
	moved = put(must(s.Update(ctx, moved, d.Revision)))
	compact(t, rawClient(t, single.Endpoints()))
	if err := s.Delete(ctx, before[0].Pool, before[0].IP, before[0].Revision); err != nil {
		t.Fatal(err)
	}
	want = append(want, store.Event{Claim: before[0], Deleted: true})
	put(must(s.Create(ctx, claimOf("blue", "10.0.0.1", "g"))))
	if err := s.Delete(ctx, moved.Pool, moved.IP, moved.Revision); err != nil {
		t.Fatal(err)
	}
	want = append(want, store.Event{Claim: moved, Deleted: true})

	eventually(t, fmt.Sprintf("fewer than %d events", len(want)), func() bool {
		_, got, _ := r.snapshot()
		return len(got) >= len(want)
	})
	resets, got, _ := r.snapshot()
	if diff := cmp.Diff(want, got, cmpClaims); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if resets != 1 {
		t.Errorf("%d Resets, want 1: nothing was lost", resets)
	}
	viewIs(t, r, state(t, s, "blue", "green", "blue-2"))
}

// A stream that breaks resumes where it was, without a Reset; a stream that
// breaks for longer than the history is kept lists again and Resets.
func TestWatchBreaks(t *testing.T) {
	prefix := newPrefix(t)
	p := newProxy(t, single.Members[0].ClientURL()[len("http://"):])
	w, err := etcdstore.New(etcdstore.Options{Endpoints: []string{p.Addr()}, Prefix: prefix,
		Timeout: 500 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	s := open(t, single, prefix)
	ctx := t.Context()
	var held []store.Claim
	var next int
	create := func(t *testing.T, n int) {
		t.Helper()
		for range n {
			c, err := s.Create(ctx, claimOf("blue", fmt.Sprintf("10.0.%d.%d", next/250, next%250+1), fmt.Sprint(next)))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			next++
		}
	}
	release := func(t *testing.T, n int) {
		t.Helper()
		for _, c := range held[:n] {
			if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
				t.Fatal(err)
			}
		}
		held = held[n:]
	}
	create(t, 5)
	r := &recorder{}
	watch(t, w, r)
	viewIs(t, r, state(t, s, "blue"))

	t.Run("resume", func(t *testing.T) {
		p.Cut()
		create(t, 10)
		release(t, 3)
		time.Sleep(300 * time.Millisecond) // let the watcher notice
		p.Restore()
		viewIs(t, r, state(t, s, "blue"))
		if n, _, _ := r.snapshot(); n != 1 {
			t.Errorf("%d Resets after a break with history kept, want 1", n)
		}
	})
	t.Run("compacted", func(t *testing.T) {
		p.Cut()
		create(t, 10)
		release(t, 5)
		compact(t, rawClient(t, single.Endpoints()))
		create(t, 2)
		time.Sleep(300 * time.Millisecond)
		p.Restore()
		viewIs(t, r, state(t, s, "blue"))
		if n, _, _ := r.snapshot(); n != 2 {
			t.Errorf("%d Resets after a break past compacted history, want 2", n)
		}
		// It follows again after the new Reset.
		create(t, 1)
		release(t, 1)
		viewIs(t, r, state(t, s, "blue"))
	})
}

// syncBuffer is a bytes.Buffer that a logger may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A stream that ends for good, which the etcd client does not heal itself,
// resumes from the revision after the last change the watcher applied: the
// watcher watches through one member of three, the other two stop, and that
// member, left without a leader, ends the streams that require one (as
// Watch's do). When the others are back, the first writes after the break
// reach the watcher too, without a Reset. (A connection cut by a proxy, as
// in TestWatchBreaks, is healed inside the client, which resumes the stream
// on its own; Watch's resumption is not used there.)
func TestWatchResumesAfterNoLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts etcd members")
	}
	// A cluster of its own: no other test writes to it, and it keeps its
	// history (trio's compactions could have the watcher list again).
	c, err := etcdtest.Start(etcdtest.Options{Members: 3, Processes: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	l, err := c.WaitLeader(leaderWait)
	if err != nil {
		t.Fatal(err)
	}
	var through *etcdtest.Member // a follower, which stays up
	var others []*etcdtest.Member
	for _, m := range c.Members {
		if m != l && through == nil {
			through = m
		} else {
			others = append(others, m)
		}
	}
	prefix := newPrefix(t)
	var logs syncBuffer
	w, err := etcdstore.New(etcdstore.Options{Endpoints: []string{through.ClientURL()}, Prefix: prefix,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	s := open(t, c, prefix)
	ctx := t.Context()
	first, err := s.Create(ctx, claimOf("blue", "10.0.0.1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	watch(t, w, r)
	viewIs(t, r, state(t, s, "blue"))

	for _, m := range others {
		m.Kill()
	}
	eventually(t, "the watcher's stream did not end without a leader", func() bool {
		return strings.Contains(logs.String(), "stream broke")
	})
	for _, m := range others {
		if err := m.Restart(); err != nil {
			t.Fatalf("restarting %s: %v", m.Name, err)
		}
	}
	if _, err := c.WaitLeader(leaderWait); err != nil {
		t.Fatal(err)
	}
	// Nothing else writes to the cluster: the first of these is at the
	// revision after the last the watcher applied.
	for i := 2; i <= 4; i++ {
		if _, err := s.Create(ctx, claimOf("blue", fmt.Sprintf("10.0.0.%d", i), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, first.Pool, first.IP, first.Revision); err != nil {
		t.Fatal(err)
	}
	viewIs(t, r, state(t, s, "blue"))
	if n, _, _ := r.snapshot(); n != 1 {
		t.Errorf("%d Resets after a break with history kept, want 1", n)
	}
	t.Logf("the watcher's log:\n%s", logs.String())
}
