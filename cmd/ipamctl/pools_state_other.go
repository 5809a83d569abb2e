//go:build !linux

package main

import (
	"errors"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// stateAllocator needs store/filestore, which is for Linux.
func stateAllocator(confPath, dir string, _ *progress) (*ipam.Allocator, store.Store, func(), error) {
	return nil, nil, nil, errors.New("--cni-config: reading a node's state directory needs Linux")
}
