package kubestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/store"
)

// claimItem is the JSON of the IPClaim of pool p, address 10.0.0.i, at
// resourceVersion 10+i, named by name (ClaimName when nil).
func claimItem(t *testing.T, i int, name func(pool string, ip netip.Addr) (string, bool)) string {
	t.Helper()
	ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
	if name == nil {
		name = addressName
	}
	n, ok := name("p", ip)
	if !ok {
		t.Fatalf("no name for %s", ip)
	}
	o := newClaimObject(n, store.Claim{Pool: "p", IP: ip, Owner: store.Owner{UID: fmt.Sprint("u", i)}}, "")
	o.ResourceVersion = fmt.Sprint(10 + i)
	o.UID = types.UID(fmt.Sprint("obj", i))
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestClaimPagesExpired: a listing whose continue token expires (the API
// server answers 410 with a token that goes on at the newest revision)
// goes on with that token, and every claim is listed once, with its
// object's resourceVersion as Revision and remembered with its UID; an
// object named the old way (LegacyClaimName) is left out and reported as
// a *CorruptError naming MigrateCommand, at the end.
func TestClaimPagesExpired(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		cont := r.URL.Query().Get("continue")
		asked = append(asked, r.URL.Query().Get("limit")+"/"+cont)
		switch cont {
		case "":
			fmt.Fprintf(w, `{"metadata":{"resourceVersion":"20","continue":"a"},"items":[%s,%s]}`, claimItem(t, 1, nil), claimItem(t, 2, LegacyClaimName))
		case "a":
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{"continue":"b"},"status":"Failure","reason":"Expired","code":410,"message":"the continue token has expired"}`)
		case "b":
			fmt.Fprintf(w, `{"metadata":{"resourceVersion":"30"},"items":[%s]}`, claimItem(t, 3, nil))
		default:
			http.Error(w, "unexpected continue "+cont, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	s, err := New(&rest.Config{Host: srv.URL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = s.ClaimPages(t.Context(), 2, func(page []store.Claim) error {
		for _, c := range page {
			got = append(got, fmt.Sprintf("%s@%d:%s", c.IP, c.Revision, c.Owner.UID))
		}
		return nil
	})
	var corrupt *CorruptError
	if !errors.As(err, &corrupt) || !errors.Is(err, store.ErrCorrupt) || corrupt.Name != "p.10.0.0.2" || !strings.Contains(err.Error(), MigrateCommand) {
		t.Errorf("ClaimPages: %v, want a *CorruptError of p.10.0.0.2 naming %q", err, MigrateCommand)
	}
	if want := "10.0.0.1@11:u1 10.0.0.3@13:u3"; strings.Join(got, " ") != want {
		t.Errorf("claims %q, want %q", got, want)
	}
	if fmt.Sprint(asked) != "[2/ 2/a 2/b]" {
		t.Errorf("limit/continue asked %q, want 2/\"\", 2/a, 2/b", asked)
	}
	if e, ok := s.seen.get("10.0.0.3", 13); !ok || e.uid != "obj3" {
		t.Errorf("claim 10.0.0.3 remembered as %+v, %v; want it at revision 13 with UID obj3", e, ok)
	}
}

// TestClaimPagesStop: ClaimPages returns the first error page returns and
// asks for no further page; a size that is not positive is refused, naming
// it, before any request.
func TestClaimPagesStop(t *testing.T) {
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"metadata":{"continue":"more"},"items":[%s]}`, claimItem(t, requests, nil))
	}))
	defer srv.Close()
	s, err := New(&rest.Config{Host: srv.URL}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimPages(t.Context(), 0, func([]store.Claim) error { return nil }); err == nil || !strings.Contains(err.Error(), "size 0") {
		t.Errorf("ClaimPages of size 0: %v, want an error naming size 0", err)
	}
	stop := errors.New("stop")
	if err := s.ClaimPages(t.Context(), 1, func([]store.Claim) error { return stop }); err != stop {
		t.Errorf("ClaimPages: %v, want page's error %v", err, stop)
	}
	if requests != 1 {
		t.Errorf("%d list requests, want 1", requests)
	}
}
