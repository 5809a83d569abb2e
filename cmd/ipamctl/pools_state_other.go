//go:build !linux

package main

import (
	"context"
	"errors"
	"time"

	"github.com/ipamkit/ipam"
)

// stateUsage needs store/filestore, which is for Linux.
func stateUsage(ctx context.Context, confPath, dir string, now time.Time) ([]ipam.Usage, error) {
	return nil, errors.New("--cni-config: reading a node's state directory needs Linux")
}
