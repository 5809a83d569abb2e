//go:build etcd

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/cmd/internal/limited"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
)

// The ipam.etcd section puts the network's claims in etcd instead of the
// state directory, so that the nodes of a cluster share its pools. It is
// etcdstore.Config: endpoints, prefix, caFile, certFile, keyFile,
// dialTimeout, timeout. The claims of network <name> live under
// <prefix><name>/ (the prefix "/ipam/" by default).
//
// This file is built with -tags etcd only: the etcd client's packages
// (gRPC, protobuf) make every start of the plugin slower, and a plugin
// built without them refuses the section (etcd_none.go).

// etcdConfig reads the ipam.etcd section of network name: its keys under
// the section's prefix, in a directory of the network's name.
func etcdConfig(raw json.RawMessage, name string) (etcdstore.Options, error) {
	var ec etcdstore.Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ec); err != nil {
		return etcdstore.Options{}, decodeError(fmt.Errorf("ipam.etcd: %w", err))
	}
	if err := ec.Validate(); err != nil {
		return etcdstore.Options{}, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.etcd: %w", err)}
	}
	// etcdstore reads the TLS files whole: a file over the limit (such as
	// /dev/zero) is refused here first. A file that cannot be read at all
	// is etcdstore's to report (code 5).
	for _, f := range []struct{ field, path string }{{"caFile", ec.CAFile}, {"certFile", ec.CertFile}, {"keyFile", ec.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := limited.ReadFile(f.path, limited.MaxFile); errors.Is(err, limited.ErrTooLarge) {
			return etcdstore.Options{}, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.etcd.%s %q: %w", f.field, f.path, err)}
		}
	}
	opts := ec.Options()
	if opts.Prefix == "" {
		opts.Prefix = etcdstore.DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	opts.Prefix += name + "/"
	return opts, nil
}

// checkEtcd reports what is wrong with the ipam.etcd section of network
// name, connecting to nothing.
func checkEtcd(raw json.RawMessage, name string) error {
	_, err := etcdConfig(raw, name)
	return err
}

// openEtcd opens the claims of network name in etcd. Connecting waits for
// the first request.
func openEtcd(raw json.RawMessage, name string) (store.Store, io.Closer, error) {
	opts, err := etcdConfig(raw, name)
	if err != nil {
		return nil, nil, err
	}
	s, err := etcdstore.New(opts)
	if err != nil {
		// A TLS file that cannot be read.
		return nil, nil, &codedError{types.ErrIOFailure, err}
	}
	return s, s, nil
}

// etcdStatus reports whether the cluster answers a linearizable read (which
// needs a quorum) within the section's timeout, bounded by limit.
func etcdStatus(raw json.RawMessage, name string, pools []*ipam.Pool, limit time.Duration) error {
	opts, err := etcdConfig(raw, name)
	if err != nil {
		return toCNI(nil, err)
	}
	s, err := etcdstore.New(opts)
	if err != nil {
		return toCNI(nil, &codedError{types.ErrIOFailure, err})
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), min(limit, cmpOr(opts.Timeout, etcdstore.DefaultTimeout)))
	defer cancel()
	pool := ""
	if len(pools) > 0 {
		pool = pools[0].Name
	}
	if _, err := s.PoolVersion(ctx, pool); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}

// etcdUnavailable reports whether err says that etcd could not be reached
// in time: CNI code 11, try again later.
func etcdUnavailable(err error) bool { return errors.Is(err, etcdstore.ErrUnavailable) }

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
