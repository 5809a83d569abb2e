package etcdstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Options.
const (
	// DefaultPrefix is the key prefix of a Store whose Options.Prefix is empty.
	DefaultPrefix = "/ipam/"
	// DefaultTimeout bounds each request (Options.Timeout).
	DefaultTimeout = 5 * time.Second
	// DefaultDialTimeout bounds each attempt to connect to an endpoint.
	DefaultDialTimeout = 2 * time.Second
	// DefaultListPageSize is how many keys List and Watch read per request.
	DefaultListPageSize = 1000
)

// Options configure a Store. Endpoints (or Client) is required; every other
// field has a useful zero value.
//
// Options are plain values; New copies what it needs.
type Options struct {
	// Endpoints are the client URLs of the etcd members, such as
	// "https://10.0.0.1:2379", or host:port pairs. All use one scheme:
	// https (or host:port with TLS set) for TLS, http for none.
	Endpoints []string
	// Prefix is put before every key the Store reads or writes, so that
	// several clusters or tenants share one etcd: give each its own prefix,
	// none a prefix of another's ("/ipam/a/" and "/ipam/b/", not "/ipam/"
	// and "/ipam/a/"). A "/" is added if it does not end in one. Empty
	// means DefaultPrefix.
	Prefix string

	// CAFile is a PEM file of the certificate authorities that the
	// members' certificates are checked against. Empty means the system's.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key, for
	// members that require client certificates. Both or neither.
	CertFile string
	KeyFile  string
	// TLS is the TLS configuration to connect with, instead of CAFile,
	// CertFile and KeyFile (set either, not both). New clones it.
	TLS *tls.Config

	// DialTimeout bounds each attempt to connect to an endpoint (TCP and
	// TLS). Zero means DefaultDialTimeout. Connecting does not block New:
	// the first request waits for it.
	DialTimeout time.Duration
	// Timeout bounds each request to etcd, whatever the deadline of the
	// caller's context (which bounds it too when it comes sooner): a
	// cluster without quorum leaves requests waiting, and a caller with a
	// long deadline, such as a CNI plugin's, learns of it after Timeout
	// instead. Zero means DefaultTimeout. A request that runs out of time,
	// its caller's or this, fails with ErrUnavailable.
	Timeout time.Duration
	// ListPageSize is how many keys List and Watch read per request, all
	// pages at one revision. Zero means DefaultListPageSize.
	ListPageSize int

	// Client, if set, is the etcd client to use instead of connecting to
	// Endpoints; Endpoints and the TLS fields must then be empty. The Store
	// does not close it.
	Client *clientv3.Client
	// Logger receives warnings: records the Store cannot read, a Watch that
	// lost its stream. Nil discards them.
	Logger *slog.Logger
}

// Validate reports every problem of o at once, each naming the field and
// the value.
func (o Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Client != nil {
		if len(o.Endpoints) > 0 {
			add("endpoints %q: set with client; use one or the other", o.Endpoints)
		}
		if o.TLS != nil || o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" {
			add("tls: set with client; the client has its own")
		}
	} else if len(o.Endpoints) == 0 {
		add("endpoints is empty: name at least one etcd member")
	}
	tlsSet := o.TLS != nil || o.CAFile != "" || o.CertFile != ""
	var http, https bool
	for i, ep := range o.Endpoints {
		scheme, err := endpointScheme(ep)
		switch {
		case err != nil:
			add("endpoints[%d] %q: %w", i, ep, err)
		case scheme == "http" && tlsSet:
			add("endpoints[%d] %q: plain http with TLS configured; use https://", i, ep)
		}
		http = http || scheme == "http"
		https = https || scheme == "https"
	}
	if http && https {
		add("endpoints %q: mix http and https; use one scheme for all", o.Endpoints)
	}
	if o.TLS != nil && (o.CAFile != "" || o.CertFile != "" || o.KeyFile != "") {
		add("tls: set with caFile, certFile or keyFile; use one or the other")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		add("certFile %q and keyFile %q: set both or neither", o.CertFile, o.KeyFile)
	}
	if o.DialTimeout < 0 {
		add("dialTimeout %s: negative", o.DialTimeout)
	}
	if o.Timeout < 0 {
		add("timeout %s: negative", o.Timeout)
	}
	if o.ListPageSize < 0 {
		add("listPageSize %d: negative", o.ListPageSize)
	}
	return errors.Join(errs...)
}

// endpointScheme returns "http" or "https" for an endpoint URL, and "" for
// host:port, which uses TLS if TLS is configured.
func endpointScheme(ep string) (string, error) {
	if !strings.Contains(ep, "://") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return "", fmt.Errorf("not a URL or host:port: %w", err)
		}
		return "", nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	return u.Scheme, nil
}

// prefix returns o.Prefix as the Store uses it.
func (o Options) prefix() string {
	p := o.Prefix
	if p == "" {
		return DefaultPrefix
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// tlsConfig returns the TLS configuration of o, reading its files, or nil
// for none.
func (o Options) tlsConfig() (*tls.Config, error) {
	if o.TLS != nil {
		return o.TLS.Clone(), nil
	}
	if o.CAFile == "" && o.CertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %q: no PEM certificate in it", o.CAFile)
		}
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("certFile %q, keyFile %q: %w", o.CertFile, o.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Config is the JSON form of Options, for a configuration file: a CNI
// network config's "etcd" section, for one. Durations are strings that
// time.ParseDuration reads, such as "5s".
//
//	"etcd": {
//		"endpoints": ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"],
//		"prefix": "/ipam/cluster-a/",
//		"caFile": "/etc/cni/etcd/ca.pem",
//		"certFile": "/etc/cni/etcd/client.pem",
//		"keyFile": "/etc/cni/etcd/client-key.pem",
//		"dialTimeout": "2s",
//		"timeout": "5s"
//	}
//
// The zero Config is not valid: it needs endpoints. A Config is a plain
// value.
type Config struct {
	Endpoints   []string `json:"endpoints"`
	Prefix      string   `json:"prefix,omitempty"`
	CAFile      string   `json:"caFile,omitempty"`
	CertFile    string   `json:"certFile,omitempty"`
	KeyFile     string   `json:"keyFile,omitempty"`
	DialTimeout Duration `json:"dialTimeout,omitzero"`
	Timeout     Duration `json:"timeout,omitzero"`
}

// Options returns the Options that c describes.
func (c Config) Options() Options {
	return Options{
		Endpoints:   c.Endpoints,
		Prefix:      c.Prefix,
		CAFile:      c.CAFile,
		CertFile:    c.CertFile,
		KeyFile:     c.KeyFile,
		DialTimeout: time.Duration(c.DialTimeout),
		Timeout:     time.Duration(c.Timeout),
	}
}

// Validate reports every problem of c at once, each naming the field.
func (c Config) Validate() error { return c.Options().Validate() }

// Duration is a time.Duration that reads and writes itself as text, such as
// "1.5s", in JSON and other text formats. The zero Duration is zero.
type Duration time.Duration

// MarshalText returns d as time.Duration's String writes it.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText reads a duration as time.ParseDuration does.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}
