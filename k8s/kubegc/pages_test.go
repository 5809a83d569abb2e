package kubegc

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// TestClaimPagesExpired: a listing whose continue token expires (the API
// server answers 410 with a token that goes on at the newest revision)
// goes on with that token, and every claim is listed once.
func TestClaimPagesExpired(t *testing.T) {
	item := func(i int) string {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
		name, _ := kubestore.ClaimName(ip)
		return fmt.Sprintf(`{"metadata":{"name":%q,"resourceVersion":"%d"},"spec":{"pool":"p","ip":%q,"owner":{"uid":"u%d"}}}`, name, 10+i, ip, i)
	}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		cont := r.URL.Query().Get("continue")
		asked = append(asked, cont)
		switch cont {
		case "":
			fmt.Fprintf(w, `{"metadata":{"continue":"a"},"items":[%s,%s]}`, item(1), item(2))
		case "a":
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{"continue":"b"},"status":"Failure","reason":"Expired","code":410,"message":"the continue token has expired"}`)
		case "b":
			fmt.Fprintf(w, `{"metadata":{},"items":[%s]}`, item(3))
		default:
			http.Error(w, "unexpected continue "+cont, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	pager, err := IPClaimPages(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = pager.ClaimPages(t.Context(), 2, func(page []store.Claim) error {
		for _, c := range page {
			got = append(got, fmt.Sprintf("%s@%d:%s", c.IP, c.Revision, c.Owner.UID))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "10.0.0.1@11:u1 10.0.0.2@12:u2 10.0.0.3@13:u3"; strings.Join(got, " ") != want {
		t.Errorf("claims %q, want %q", got, want)
	}
	if fmt.Sprint(asked) != "[ a b]" {
		t.Errorf("continue tokens asked %q, want \"\", a, b", asked)
	}
}
