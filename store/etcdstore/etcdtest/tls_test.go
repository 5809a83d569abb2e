package etcdtest_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

// authority is a certificate authority made for a test.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

// newAuthority makes a CA named name and writes its certificate to dir.
func newAuthority(t *testing.T, dir, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	a := &authority{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, a.file, "CERTIFICATE", der)
	return a
}

// issue makes a certificate for name signed by a, for a server (on
// 127.0.0.1) or a client, and writes it and its key to dir; it returns the
// two file names.
func (a *authority) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A member that serves clients over TLS and requires client certificates:
// a client with a certificate of the right authority works, through the
// JSON configuration or a *tls.Config; one without a certificate, with one
// from another authority, or that does not trust the member's, is refused,
// with an error that says why.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newAuthority(t, dir, "ca")
	other := newAuthority(t, dir, "other-ca")
	serverCert, serverKey := ca.issue(t, dir, "server", true)
	clientCert, clientKey := ca.issue(t, dir, "client", false)
	strangerCert, strangerKey := other.issue(t, dir, "stranger", false)

	c, err := etcdtest.Start(etcdtest.Options{Dir: filepath.Join(dir, "data"), TLS: &etcdtest.TLS{
		CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: ca.file, ClientCertAuth: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	endpoint := c.Members[0].ClientURL()
	if !strings.HasPrefix(endpoint, "https://") {
		t.Fatalf("endpoint %s is not https", endpoint)
	}

	t.Run("Config", func(t *testing.T) {
		var cfg etcdstore.Config
		doc := `{"endpoints": [` + quote(endpoint) + `], "prefix": "/tls/", "caFile": ` + quote(ca.file) +
			`, "certFile": ` + quote(clientCert) + `, "keyFile": ` + quote(clientKey) + `, "timeout": "3s"}`
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		s, err := etcdstore.NewFromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, err := s.Create(t.Context(), claimOf("blue", "10.0.0.1", "a"))
		if err != nil {
			t.Fatalf("Create over TLS with a client certificate: %v", err)
		}
		if got, err := s.Get(t.Context(), "blue", c.IP); err != nil || got.Revision != c.Revision {
			t.Fatalf("Get over TLS = %+v, %v", got, err)
		}
	})
	t.Run("tls.Config", func(t *testing.T) {
		pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
		s, err := etcdstore.New(etcdstore.Options{Endpoints: []string{endpoint}, Prefix: "/tls/",
			TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Owned(t.Context(), store.ByUID("uid-a")); err != nil {
			t.Fatalf("Owned over TLS with a *tls.Config: %v", err)
		}
	})

	for _, tc := range []struct {
		name string
		o    etcdstore.Options
		says string // what the error says
	}{
		{"NoCertificate", etcdstore.Options{CAFile: ca.file},
			"the member asks for a client certificate, and none is configured (certFile, keyFile)"},
		{"OtherAuthority", etcdstore.Options{CAFile: ca.file, CertFile: strangerCert, KeyFile: strangerKey},
			`the member accepts client certificates issued by "CN=ca", and the client's is issued by "CN=other-ca"`},
		{"UntrustedServer", etcdstore.Options{CertFile: clientCert, KeyFile: clientKey},
			"tls: failed to verify certificate: x509: certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Endpoints, tc.o.Prefix, tc.o.Timeout = []string{endpoint}, "/tls/", time.Second
			s, err := etcdstore.New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Get(t.Context(), "blue", claimOf("blue", "10.0.0.1", "a").IP)
			if err == nil {
				t.Fatal("Get succeeded, want the member to refuse the client")
			}
			if !errors.Is(err, etcdstore.ErrUnavailable) {
				t.Errorf("Get: %v, want an error wrapping ErrUnavailable", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Get: %v\nwant an error that says %q", err, tc.says)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
