package kubetest_test

import (
	"context"
	"errors"
	"iter"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// storeCalls are one call of each Store method that talks to the server,
// about held (a claim that exists) and free (an address that does not).
func storeCalls(s *kubestore.Store, held store.Claim, free store.Claim) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Get":    func(ctx context.Context) error { _, err := s.Get(ctx, held.Pool, held.IP); return err },
		"List":   func(ctx context.Context) error { _, err := s.List(ctx, held.Pool); return err },
		"Owned":  func(ctx context.Context) error { _, err := s.Owned(ctx, held.Owner.Query()); return err },
		"Create": func(ctx context.Context) error { _, err := s.Create(ctx, free); return err },
		"CreateAndSetCursor": func(ctx context.Context) error {
			_, err := s.CreateAndSetCursor(ctx, free)
			return err
		},
		"Update": func(ctx context.Context) error { _, err := s.Update(ctx, held, held.Revision); return err },
		"Delete": func(ctx context.Context) error { return s.Delete(ctx, held.Pool, held.IP, held.Revision) },
		"Cursor": func(ctx context.Context) error { _, err := s.Cursor(ctx, held.Pool); return err },
		"SetCursor": func(ctx context.Context) error {
			return s.SetCursor(ctx, held.Pool, held.IP)
		},
		"Watch": func(ctx context.Context) error { return s.Watch(ctx, nopHandler{}) },
	}
}

type nopHandler struct{}

func (nopHandler) Reset([]store.Claim) {}
func (nopHandler) Apply(store.Event)   {}

// TestServerDown stops the API server: every call fails within its
// context's deadline with kubestore.ErrUnavailable; started again on the
// same address, the same Store works as before.
func TestServerDown(t *testing.T) {
	emptyBackend(t)
	s := newStore(t)
	held, err := s.Create(t.Context(), store.Claim{Pool: "down", IP: netip.MustParseAddr("10.1.0.1"),
		Owner: store.Owner{UID: "u1", Interface: "eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	free := store.Claim{Pool: "down", IP: netip.MustParseAddr("10.1.0.2"), Owner: store.Owner{UID: "u2", Interface: "eth0"}}

	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.StartAPI(); err != nil {
			t.Fatal(err)
		}
	})
	for name, err := range callWithin(t, "with the server down", 2*time.Second, storeCalls(s, held, free)) {
		switch {
		case name == "Watch":
			// Watch retries until its context ends, then returns its error.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Watch with the server down: %v, want context.DeadlineExceeded", err)
			}
		case !errors.Is(err, kubestore.ErrUnavailable):
			t.Errorf("%s with the server down: %v, want kubestore.ErrUnavailable", name, err)
		}
	}

	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), held.Pool, held.IP)
	if err != nil || got.Revision != held.Revision {
		t.Fatalf("Get after the restart = %+v, %v; want the claim at revision %d", got, err, held.Revision)
	}
	if _, err := s.Create(t.Context(), free); err != nil {
		t.Fatalf("Create after the restart: %v", err)
	}
	if err := s.Delete(t.Context(), held.Pool, held.IP, held.Revision); err != nil {
		t.Fatalf("Delete after the restart: %v", err)
	}
}

// TestServerHangs points a Store at a server that accepts connections and
// never answers: every call fails at its context's deadline with
// kubestore.ErrUnavailable, wrapping the context's error.
func TestServerHangs(t *testing.T) {
	cfg := srv.Config()
	cfg.Host = "https://" + hungListener(t)
	s, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held := store.Claim{Pool: "hang", IP: netip.MustParseAddr("10.1.0.1"), Owner: store.Owner{UID: "u1"}, Revision: 5}
	free := store.Claim{Pool: "hang", IP: netip.MustParseAddr("10.1.0.2"), Owner: store.Owner{UID: "u2"}}
	for name, err := range callWithin(t, "against a hung server", 300*time.Millisecond, storeCalls(s, held, free)) {
		if !errors.Is(err, context.DeadlineExceeded) || (name != "Watch" && !errors.Is(err, kubestore.ErrUnavailable)) {
			t.Errorf("%s against a hung server: %v, want kubestore.ErrUnavailable and context.DeadlineExceeded", name, err)
		}
	}
}

// hungListener returns the address of a listener that never accepts: the
// kernel completes the handshakes, and nobody answers.
func hungListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// callWithin makes each call with a context of deadline, fails t for each
// that takes more than ten seconds longer (a loaded machine's delay; a call
// that ignored its deadline would wait for its client's, or for ever), and
// yields each call's name and error.
func callWithin(t *testing.T, what string, deadline time.Duration, calls map[string]func(context.Context) error) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for name, call := range calls {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			t.Logf("%s %s: %s: %v", name, what, took.Round(time.Millisecond), err)
			if took > deadline+10*time.Second {
				t.Errorf("%s %s took %s, past its %s deadline", name, what, took, deadline)
			}
			if !yield(name, err) {
				return
			}
		}
	}
}
