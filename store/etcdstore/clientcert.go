package etcdstore

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"strings"
	"sync/atomic"
)

// certNote remembers why the members may be refusing this client's
// certificate, for the errors of calls that cannot reach them. With TLS 1.3
// a member checks the client's certificate after the handshake, and its
// refusal reaches the client as an alert that the next write may lose to
// the closed connection ("broken pipe"): what the member asked for in the
// handshake is the one reliable clue.
type certNote struct {
	p atomic.Pointer[string]
}

// get returns the note, or "" if there is none.
func (n *certNote) get() string {
	if s := n.p.Load(); s != nil {
		return *s
	}
	return ""
}

func (n *certNote) set(s string) {
	if s == "" {
		n.p.Store(nil)
		return
	}
	n.p.Store(&s)
}

// watch makes c pick its client certificate as crypto/tls does (the first
// that the member accepts, else the first), and note when the member asks
// for one that c has not, or accepts none of c's. It leaves a c that picks
// its own certificates alone.
func (n *certNote) watch(c *tls.Config) {
	if c.GetClientCertificate != nil {
		return
	}
	certs := c.Certificates
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if len(certs) == 0 {
			n.set("the member asks for a client certificate, and none is configured (certFile, keyFile)")
			return &tls.Certificate{}, nil
		}
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				n.set("")
				return &certs[i], nil
			}
		}
		issuer := "?"
		if leaf, err := x509.ParseCertificate(certs[0].Certificate[0]); err == nil {
			issuer = leaf.Issuer.String()
		}
		n.set(fmt.Sprintf("the member accepts client certificates issued by %s, and the client's is issued by %q",
			names(cri.AcceptableCAs), issuer))
		return &certs[0], nil
	}
}

// names returns DER-encoded distinguished names as text.
func names(ders [][]byte) string {
	var out []string
	for _, der := range ders {
		var rdn pkix.RDNSequence
		if _, err := asn1.Unmarshal(der, &rdn); err != nil {
			continue
		}
		var name pkix.Name
		name.FillFromRDNSequence(&rdn)
		out = append(out, fmt.Sprintf("%q", name.String()))
	}
	if len(out) == 0 {
		return "authorities it does not name"
	}
	return strings.Join(out, ", ")
}
