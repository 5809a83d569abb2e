//go:build kubernetes

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/cmd/internal/kubeconfig"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// The ipam.kubernetes section puts the network's claims in the cluster's
// API, as IPClaim objects (k8s/kubestore), and takes its pools from the
// cluster's SpiderIPPools and SpiderReservedIPs (k8s/kubepools), read once
// per call. The pod is read from the cluster too: its UID owns the claims,
// and its labels and annotations, its namespace's and its node's labels
// choose the pools, as Spiderpool chooses them.
//
// This file is built with -tags kubernetes only: the Kubernetes client's
// packages make every start of the plugin slower, and a plugin built
// without them refuses the section (kubernetes_none.go).

// kubernetesConfig is the ipam.kubernetes section.
type kubernetesConfig struct {
	// Kubeconfig is the path of a kubeconfig file; empty means the
	// service account of the pod the plugin runs in (in-cluster).
	Kubeconfig string `json:"kubeconfig"`
	// QPS and Burst are the client's rate limits; zero keeps client-go's
	// (5 and 10), which one call does not reach.
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
	// Timeout bounds what one call asks of the API server, all its
	// requests together, such as "10s"; empty means
	// defaultKubernetesTimeout. STATUS waits at most statusTimeout.
	Timeout string `json:"timeout"`
	// Agent is the unix socket of the node agent ("cni-ipam agent",
	// agent.go) that serves the calls; empty, each call reads the cluster
	// itself. With an agent, the plugin forwards the call before it reads
	// anything else of the section (agentclient.go), and the agent uses
	// its own credentials and rate limits: kubeconfig, qps and burst are
	// not used.
	Agent string `json:"agent"`
}

// defaultKubernetesTimeout bounds the requests of one call to the API
// server: an ADD makes about eight, each answered in milliseconds by a
// healthy server. A server that does not answer gets the call code 11
// after this, not after the call's 100 s.
const defaultKubernetesTimeout = 20 * time.Second

// statusTimeout bounds STATUS, a readiness probe, when the section's
// timeout is longer.
const statusTimeout = 5 * time.Second

// parseKubernetes reads the section.
func parseKubernetes(raw json.RawMessage) (kubernetesConfig, time.Duration, error) {
	var kc kubernetesConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kc); err != nil {
		return kc, 0, decodeError(fmt.Errorf("ipam.kubernetes: %w", err))
	}
	if kc.QPS < 0 || kc.Burst < 0 {
		return kc, 0, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.kubernetes: qps %v, burst %d: negative", kc.QPS, kc.Burst)}
	}
	timeout := defaultKubernetesTimeout
	if kc.Timeout != "" {
		d, err := time.ParseDuration(kc.Timeout)
		if err != nil || d <= 0 {
			return kc, 0, &codedError{types.ErrInvalidNetworkConfig,
				fmt.Errorf("ipam.kubernetes: timeout %q: want a positive duration such as \"10s\"", kc.Timeout)}
		}
		timeout = d
	}
	return kc, timeout, nil
}

// kubernetesTimeout returns the section's timeout.
func kubernetesTimeout(raw json.RawMessage) (time.Duration, error) {
	_, d, err := parseKubernetes(raw)
	return d, err
}

// restConfig reads the section and finds the cluster it names.
func restConfig(raw json.RawMessage) (*rest.Config, error) {
	kc, _, err := parseKubernetes(raw)
	if err != nil {
		return nil, err
	}
	if kc.Kubeconfig != "" {
		// client-go reads the file, and those it names, whole.
		if err := kubeconfig.Check(kc.Kubeconfig); err != nil {
			return nil, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.kubernetes.kubeconfig %w", err)}
		}
	}
	cfg, err := kubeclient.Config(kc.Kubeconfig)
	if err != nil {
		return nil, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.kubernetes: %w", err)}
	}
	if kc.QPS != 0 {
		cfg.QPS = kc.QPS
	}
	if kc.Burst != 0 {
		cfg.Burst = kc.Burst
	}
	cfg.UserAgent = "cni-ipam"
	return cfg, nil
}

// openKubernetes opens the claims and reads the pools of the cluster the
// section names.
func openKubernetes(ctx context.Context, raw json.RawMessage, warn io.Writer) (store.Store, ipam.PoolSource, cluster, error) {
	cfg, err := restConfig(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return nil, nil, nil, &codedError{types.ErrInvalidNetworkConfig, err}
	}
	// Invalid pools are skipped, and said on stderr, which the runtime logs.
	log := slog.New(slog.NewTextHandler(warn, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pools, err := kubepools.Load(ctx, cfg, kubepools.Options{Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := kubeclient.New(cfg)
	if err != nil {
		return nil, nil, nil, &codedError{types.ErrInvalidNetworkConfig, err}
	}
	return st, pools, &kubeCluster{c, st}, nil
}

// kubeCluster reads pods from a cluster.
type kubeCluster struct {
	c *kubeclient.Client
	// st is the call's Store: told the pod's node, whose round-robin
	// cursors it then uses (kubestore.Options.Node).
	st *kubestore.Store
}

func (k *kubeCluster) request(ctx context.Context, pod podArgs, containerID, ifname string, nc ipam.NetConf) (ipam.Request, error) {
	req, err := podRequest(ctx, k.c, pod, containerID, ifname, nc)
	if err == nil && req.Node != "" {
		k.st.SetNode(req.Node)
	}
	return req, err
}

// podReader reads the objects a pod's request is made of: a
// *kubeclient.Client asks the API server, the agent its caches first. Each
// returns nil and no error for an object that does not exist.
type podReader interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// podRequest returns the request of the pod that CNI_ARGS names, read with
// r: its UID owns the claims; its labels and annotations, its namespace's
// and its node's choose the pools.
func podRequest(ctx context.Context, r podReader, pod podArgs, containerID, ifname string, nc ipam.NetConf) (ipam.Request, error) {
	p, err := r.Pod(ctx, pod.Namespace, pod.Name)
	switch {
	case err != nil:
		return ipam.Request{}, err
	case p == nil:
		return ipam.Request{}, fmt.Errorf("pod %s/%s does not exist", pod.Namespace, pod.Name)
	case pod.UID != "" && string(p.UID) != pod.UID:
		return ipam.Request{}, fmt.Errorf("pod %s/%s has uid %s, not K8S_POD_UID %s: the pod was replaced", pod.Namespace, pod.Name, p.UID, pod.UID)
	}
	ns, err := r.Namespace(ctx, p.Namespace)
	if err != nil {
		return ipam.Request{}, err
	}
	var n *corev1.Node
	if p.Spec.NodeName != "" {
		if n, err = r.Node(ctx, p.Spec.NodeName); err != nil {
			return ipam.Request{}, err
		}
	}
	req := k8s.Request(p, ns, n, ipam.NIC{Name: ifname})
	req.ContainerID = containerID
	req.NetConf = nc
	return req, nil
}

// kubernetesStatus reports whether the API server answers, and serves
// IPClaims, within limit, the section's timeout and statusTimeout: a read
// of a claim that does not exist.
func kubernetesStatus(raw json.RawMessage, limit time.Duration) error {
	cfg, err := restConfig(raw)
	if err != nil {
		return toCNI(nil, err)
	}
	timeout, _ := kubernetesTimeout(raw) // read by restConfig already
	limit = min(limit, timeout, statusTimeout)
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return toCNI(nil, &codedError{types.ErrInvalidNetworkConfig, err})
	}
	return storeStatus(st, limit)
}

// storeStatus reports whether st answers within limit: a read of a claim
// that does not exist. An error is code 50, plugin not available.
func storeStatus(st store.Store, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_, err := st.Get(ctx, "cni-ipam-status", netip.IPv4Unspecified())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}

// kubernetesUnavailable reports whether err says that the API server gave
// no usable answer in time: CNI code 11, try again later.
func kubernetesUnavailable(err error) bool { return errors.Is(err, kubestore.ErrUnavailable) }
