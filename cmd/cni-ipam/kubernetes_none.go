//go:build !kubernetes

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// errNoKubernetes is the answer of a plugin built without Kubernetes
// support to a network config with an ipam.kubernetes section (see
// kubernetes.go).
var errNoKubernetes = &codedError{types.ErrInvalidNetworkConfig,
	errors.New("ipam.kubernetes: this cni-ipam is built without Kubernetes support; build it with -tags kubernetes")}

func openKubernetes(context.Context, json.RawMessage, io.Writer) (store.Store, ipam.PoolSource, cluster, error) {
	return nil, nil, nil, errNoKubernetes
}

func kubernetesTimeout(json.RawMessage) (time.Duration, error) { return 0, errNoKubernetes }

func kubernetesStatus(json.RawMessage, time.Duration) error { return toCNI(nil, errNoKubernetes) }

func kubernetesUnavailable(error) bool { return false }
