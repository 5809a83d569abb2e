//go:build !etcd

package main

import (
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// errNoEtcd is the answer of a plugin built without etcd support to a
// network config with an ipam.etcd section (see etcd.go).
var errNoEtcd = &codedError{types.ErrInvalidNetworkConfig,
	errors.New("ipam.etcd: this cni-ipam is built without etcd support; build it with -tags etcd")}

func checkEtcd(json.RawMessage, string) error { return errNoEtcd }

func openEtcd(json.RawMessage, string) (store.Store, io.Closer, error) { return nil, nil, errNoEtcd }

func etcdStatus(json.RawMessage, string, []*ipam.Pool, time.Duration) error {
	return toCNI(nil, errNoEtcd)
}

func etcdUnavailable(error) bool { return false }
