package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// view is a store.WatchHandler that keeps the claims it has been told of,
// by key, and counts the Resets.
type view struct {
	mu      sync.Mutex
	claims  map[string]store.Claim
	resets  int
	changed chan struct{}
}

func newView() *view { return &view{claims: map[string]store.Claim{}, changed: make(chan struct{}, 1)} }

func (v *view) Reset(claims []store.Claim) {
	v.mu.Lock()
	v.claims = map[string]store.Claim{}
	for _, c := range claims {
		v.claims[c.Key()] = c
	}
	v.resets++
	v.mu.Unlock()
	v.notify()
}

func (v *view) Apply(e store.Event) {
	v.mu.Lock()
	if e.Deleted {
		delete(v.claims, e.Claim.Key())
	} else {
		v.claims[e.Claim.Key()] = e.Claim
	}
	v.mu.Unlock()
	v.notify()
}

func (v *view) notify() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// state returns what v holds: each key with its revision.
func (v *view) state() map[string]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]int64{}
	for k, c := range v.claims {
		out[k] = c.Revision
	}
	return out
}

// waitFor waits until v holds exactly want (key to revision).
func (v *view) waitFor(t *testing.T, what string, want map[string]int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got := v.state()
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-v.changed:
		case <-deadline:
			t.Fatalf("%s: the watcher holds %v, want %v", what, got, want)
		}
	}
}

// waitHas waits until v holds c at its revision (or a later one).
func (v *view) waitHas(t *testing.T, c store.Claim) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		got, ok := v.claims[c.Key()]
		v.mu.Unlock()
		if ok && got.Revision >= c.Revision {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the watcher does not hold %s at revision %d after 10s", c.Key(), c.Revision)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func revisions(claims ...store.Claim) map[string]int64 {
	out := map[string]int64{}
	for _, c := range claims {
		out[c.Key()] = c.Revision
	}
	return out
}

// TestWatch follows creates, updates and deletes through another Store,
// skips a bad object, and carries on after the API server restarts.
func TestWatch(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	writer := newStore(t)
	claim := func(ip string, uid string) store.Claim {
		return store.Claim{Pool: "w", IP: netip.MustParseAddr(ip), Owner: store.Owner{UID: uid, Interface: "eth0"}}
	}
	a, err := writer.Create(ctx, claim("10.2.0.1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := writer.Create(ctx, claim("2001:db8::2", "b"))
	if err != nil {
		t.Fatal(err)
	}

	v := newView()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newStore(t).Watch(wctx, v) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v after its context was canceled, want context.Canceled", err)
		}
	}()
	v.waitFor(t, "after the first list", revisions(a, b))

	c, err := writer.Create(ctx, claim("10.2.0.3", "c"))
	if err != nil {
		t.Fatal(err)
	}
	moved := a
	moved.Owner.UID = "a2"
	if moved, err = writer.Update(ctx, moved, a.Revision); err != nil {
		t.Fatal(err)
	}
	if err := writer.Delete(ctx, b.Pool, b.IP, b.Revision); err != nil {
		t.Fatal(err)
	}
	createRaw(t, "w.10.2.0.9", nil, map[string]any{"pool": "w", "ip": "not an address", "owner": map[string]any{"uid": "x"}})
	v.waitFor(t, "after create, update, delete", revisions(moved, c))

	// Down and up again: the watcher catches up with what happened while it
	// was away.
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	d, err := writer.Create(ctx, claim("10.2.0.4", "d"))
	if err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "after the restart", revisions(moved, c, d))
	for i := range 20 {
		if _, err := writer.Create(ctx, claim(fmt.Sprintf("10.2.1.%d", i), "e")); err != nil {
			t.Fatal(err)
		}
	}
	all, err := writer.List(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "after 20 more", revisions(all...))
	if keys := slices.Collect(maps.Keys(v.state())); len(keys) != 23 {
		t.Fatalf("the watcher holds %d claims, want 23", len(keys))
	}
}

// A watch event whose object has a field of the wrong type, which an API
// server that checks the CRD's schema never sends, is skipped and logged
// naming the field, and the events after it still arrive. The server here
// is a stand-in that serves one list and one watch stream: the real one
// cannot be made to send such an event.
func TestWatchEventOfWrongType(t *testing.T) {
	name, _ := kubestore.ClaimName(netip.MustParseAddr("10.0.0.2"))
	events := `{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"11"},"spec":{"pool":"blue","ip":7}}}` + "\n" +
		fmt.Sprintf(`{"type":"ADDED","object":{"apiVersion":"ipam.ipamkit.io/v1alpha1","kind":"IPClaim",`+
			`"metadata":{"name":%q,"resourceVersion":"12","managedFields":[{"manager":"m","operation":"Update","time":"2024-05-01T12:00:00Z"}]},`+
			`"spec":{"pool":"blue","ip":"10.0.0.2","owner":{"uid":"u2"}}}}`, name) + "\n"
	var watches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprint(w, `{"kind":"IPClaimList","apiVersion":"ipam.ipamkit.io/v1alpha1","metadata":{"resourceVersion":"10"},"items":[]}`)
			return
		}
		if watches.Add(1) == 1 {
			fmt.Fprint(w, events)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	s, err := kubestore.New(&rest.Config{Host: srv.URL}, kubestore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	v := newView()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, v) }()
	v.waitFor(t, "after the two events", map[string]int64{"blue/10.0.0.2": 12})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "spec.ip") || !strings.Contains(logged.String(), `\"x\"`) {
		t.Errorf("the log does not name the object and its bad field:\n%s", logged.String())
	}
	if n := watches.Load(); n != 1 {
		t.Errorf("the Store watched %d times, want once: the bad event broke the stream", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
