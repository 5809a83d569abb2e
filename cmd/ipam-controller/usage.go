package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/k8s/kubeusage"
	"github.com/ipamkit/ipam/subnet"
)

// usageWriter returns the part that writes the count columns of the
// SpiderIPPools (and, with the SpiderSubnet runner sub, of the
// SpiderSubnets) and records the PoolNearlyExhausted Events (kubeusage),
// from the usage of alloc's pools.
func usageWriter(cfg *rest.Config, c *config, alloc *ipam.Allocator, usage kubeusage.UsageSource, sub *kubesubnet.Runner,
	dynFactory dynamicinformer.DynamicSharedInformerFactory, events kubeclient.EventRecorder, log *slog.Logger) (func(context.Context) error, error) {
	opts := kubeusage.Options{
		Interval: c.usageInterval, LowFreePercent: c.lowFreePercent, LowFreeAddresses: c.lowFreeAddresses,
		Informers: dynamicInformers(dynFactory), Events: events, Logger: log, Usage: usage,
	}
	if sub != nil {
		opts.Subnets = func() []subnet.Status { return sub.Status() }
	}
	w, err := kubeusage.New(cfg, alloc, opts)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	return w.Run, nil
}
