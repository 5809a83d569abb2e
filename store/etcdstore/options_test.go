package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOptionsValidate(t *testing.T) {
	ok := []string{"http://127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		o    Options
		want []string // substrings of the error, one per problem; none: valid
	}{
		{"minimal", Options{Endpoints: ok}, nil},
		{"host:port", Options{Endpoints: []string{"10.0.0.1:2379", "[2001:db8::1]:2379"}}, nil},
		{"https with files", Options{Endpoints: []string{"https://a:2379"}, CAFile: "ca", CertFile: "c", KeyFile: "k"}, nil},
		{"host:port with TLS", Options{Endpoints: []string{"a:2379"}, TLS: &tls.Config{}}, nil},
		{"client", Options{Client: &clientv3.Client{}}, nil},
		{"nothing", Options{}, []string{"endpoints is empty"}},
		{"bad endpoints", Options{Endpoints: []string{"a", "ftp://a:1", "http://", "http://a:2379", "https://b:2379"}},
			[]string{`endpoints[0] "a": not a URL or host:port`, `endpoints[1] "ftp://a:1": scheme "ftp"`,
				`endpoints[2] "http://": no host`, `mix http and https`}},
		{"http with TLS", Options{Endpoints: ok, CAFile: "ca"}, []string{`endpoints[0] "http://127.0.0.1:2379": plain http with TLS`}},
		{"TLS twice", Options{Endpoints: []string{"https://a:1"}, TLS: &tls.Config{}, CAFile: "ca"}, []string{"tls: set with caFile"}},
		{"cert without key", Options{Endpoints: []string{"https://a:1"}, CertFile: "c"}, []string{`certFile "c" and keyFile "": set both`}},
		{"key without cert", Options{Endpoints: []string{"https://a:1"}, KeyFile: "k"}, []string{`certFile "" and keyFile "k"`}},
		{"negative", Options{Endpoints: ok, Timeout: -1, DialTimeout: -time.Second, ListPageSize: -1},
			[]string{"timeout -1ns: negative", "dialTimeout -1s: negative", "listPageSize -1: negative"}},
		{"client and endpoints", Options{Client: &clientv3.Client{}, Endpoints: ok, CAFile: "x"},
			[]string{"set with client", "tls: set with client", "plain http with TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to say %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", n, len(tc.want), err)
			}
		})
	}
}

func TestOptionsPrefix(t *testing.T) {
	for in, want := range map[string]string{"": DefaultPrefix, "/a": "/a/", "/a/": "/a/", "t1": "t1/"} {
		if got := (Options{Prefix: in}).prefix(); got != want {
			t.Errorf("prefix of %q = %q, want %q", in, got, want)
		}
	}
}

// New reads the TLS files and names the one it cannot use.
func TestNewTLSFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{CAFile: filepath.Join(dir, "missing.pem")}, "caFile: open " + filepath.Join(dir, "missing.pem")},
		{Options{CAFile: notPEM}, fmt.Sprintf("caFile %q: no PEM certificate", notPEM)},
		{Options{CertFile: notPEM, KeyFile: notPEM}, fmt.Sprintf("certFile %q, keyFile %q:", notPEM, notPEM)},
	} {
		tc.o.Endpoints = []string{"https://127.0.0.1:1"}
		s, err := New(tc.o)
		if err == nil {
			s.Close()
			t.Errorf("New(%+v) succeeded, want an error", tc.o)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want it to say %q", tc.o, err, tc.want)
		}
	}
}

func TestConfigJSON(t *testing.T) {
	in := `{"endpoints":["https://10.0.0.1:2379"],"prefix":"/ipam/a/","caFile":"/ca.pem",` +
		`"certFile":"/c.pem","keyFile":"/k.pem","dialTimeout":"1.5s","timeout":"250ms"}`
	var c Config
	if err := json.Unmarshal([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := Options{Endpoints: []string{"https://10.0.0.1:2379"}, Prefix: "/ipam/a/", CAFile: "/ca.pem",
		CertFile: "/c.pem", KeyFile: "/k.pem", DialTimeout: 1500 * time.Millisecond, Timeout: 250 * time.Millisecond}
	if got := c.Options(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Options() = %+v, want %+v", got, want)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("Marshal = %s, want %s", out, in)
	}
	if err := json.Unmarshal([]byte(`{"endpoints":["a:1"],"timeout":"5 parsecs"}`), &c); err == nil ||
		!strings.Contains(err.Error(), `duration "5 parsecs"`) {
		t.Errorf("Unmarshal of a bad duration: %v, want an error naming it", err)
	}
	if err := (Config{}).Validate(); err == nil {
		t.Error("Validate of the zero Config succeeded")
	}
}

func TestCallError(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{context.Canceled, false},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrStopped, true},
		{rpctypes.ErrTooManyRequests, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.DeadlineExceeded, "too slow"), true},
		{rpctypes.ErrCompacted, false},
		{rpctypes.ErrTooManyOps, false},
		{rpctypes.ErrPermissionDenied, false},
		{status.Error(codes.Unauthenticated, "bad token"), false},
		{errors.New("other"), false},
	} {
		got := callError(tc.err, nil, "")
		if errors.Is(got, ErrUnavailable) != tc.unavailable {
			t.Errorf("callError(%v) = %v; wraps ErrUnavailable: %t, want %t", tc.err, got, !tc.unavailable, tc.unavailable)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("callError(%v) = %v, which does not wrap the cause", tc.err, got)
		}
	}
	detail := status.Error(codes.DeadlineExceeded, "latest balancer error: tls: bad certificate")
	got := callError(context.DeadlineExceeded, detail, "the member asks for a client certificate")
	if !errors.Is(got, ErrUnavailable) || !errors.Is(got, context.DeadlineExceeded) ||
		!strings.Contains(got.Error(), "tls: bad certificate") || !strings.Contains(got.Error(), "asks for a client certificate") {
		t.Errorf("callError with detail = %v, want ErrUnavailable, context.DeadlineExceeded and the detail", got)
	}
}
