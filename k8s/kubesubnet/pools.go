package kubesubnet

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strconv"

	"go4.org/netipx"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

// Pools is the pool source of an allocator (a CNI plugin's agent) in a
// cluster whose auto-pools a Runner writes: it serves the pools of another
// PoolSource that follows the cluster's SpiderIPPools (kubepools.Source),
// and is an ipam.AppPoolSource: it finds the auto-pool of a pod's
// application by the labels of the SpiderIPPools, from a metadata-only
// informer, without asking the server and without waiting.
//
// A *Pools is safe for concurrent use. Create one with NewPools, Run it,
// and wait for WaitForSync before the first allocation.
type Pools struct {
	src      ipam.PoolSource
	informer cache.SharedIndexInformer
}

// Compile-time checks of the capabilities Pools gives the Allocator.
var (
	_ ipam.AppPoolSource     = (*Pools)(nil)
	_ ipam.DefaultPoolSource = (*Pools)(nil)
	_ ipam.ReservedSource    = (*Pools)(nil)
)

// byApp indexes auto-pools by the UID of their application.
const byApp = "app-uid"

// NewPools returns the Pools of src for the cluster cfg names. It does not
// contact the server until Run.
func NewPools(cfg *rest.Config, src ipam.PoolSource) (*Pools, error) {
	if src == nil {
		return nil, &ipam.FieldError{Object: "kubesubnet pools", Field: "src", Reason: "required: the pool source that follows the SpiderIPPools"}
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesubnet: %w", err)
	}
	f := metadatainformer.NewFilteredSharedInformerFactory(meta, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = subnet.LabelOwnerAppUID // the auto-pools
	})
	inf := f.ForResource(IPPoolResource).Informer()
	if err := inf.AddIndexers(cache.Indexers{byApp: func(obj any) ([]string, error) {
		m, err := metaAccessor(obj)
		if err != nil {
			return nil, nil
		}
		return []string{m.GetLabels()[subnet.LabelOwnerAppUID]}, nil
	}}); err != nil {
		return nil, fmt.Errorf("kubesubnet: %w", err)
	}
	return &Pools{src: src, informer: inf}, nil
}

// Run follows the auto-pools' labels until ctx is done, and returns ctx's
// error. The source's own Run is the caller's.
func (p *Pools) Run(ctx context.Context) error {
	p.informer.Run(ctx.Done())
	return ctx.Err()
}

// WaitForSync waits until the informer has listed the auto-pools once, or
// ctx is done.
func (p *Pools) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced) {
		return fmt.Errorf("kubesubnet: waiting for the auto-pools: %w", context.Cause(ctx))
	}
	return nil
}

// Pool returns the source's pool.
func (p *Pools) Pool(name string) (*ipam.Pool, bool) { return p.src.Pool(name) }

// Pools yields the source's pools.
func (p *Pools) Pools() iter.Seq[*ipam.Pool] { return p.src.Pools() }

// DefaultPools yields the source's default pools.
func (p *Pools) DefaultPools() iter.Seq[*ipam.Pool] {
	if d, ok := p.src.(ipam.DefaultPoolSource); ok {
		return d.DefaultPools()
	}
	return func(yield func(*ipam.Pool) bool) {
		for q := range p.src.Pools() {
			if q.Default && !yield(q) {
				return
			}
		}
	}
}

// Reserved returns the source's reserved addresses.
func (p *Pools) Reserved(family int) *netipx.IPSet {
	if r, ok := p.src.(ipam.ReservedSource); ok {
		return r.Reserved(family)
	}
	return nil
}

// AutoPool returns the auto-pool of req.App for interface iface and IP
// family family from the SpiderSubnet named subnet, by its labels (the
// application's UID, the interface, the IP version, the subnet). It never
// waits: a pool that does not exist yet, or that the source has not loaded
// yet, is an error wrapping ipam.ErrNotReady at once; a request without an
// application is ipam.ErrNotSupported, as in Spiderpool; a pool of the
// application from another subnet is ipam.ErrNotSupported (a running
// application's subnet does not change).
func (p *Pools) AutoPool(req *ipam.Request, iface string, family int, subnetName string) (string, error) {
	app := req.App
	fail := func(reason string, sentinel error) (string, error) {
		return "", &subnet.Error{App: app, Pod: req.Namespace + "/" + req.Name, Interface: iface, Family: family, Subnet: subnetName,
			Reason: reason, Err: sentinel}
	}
	if app.IsZero() {
		return fail("SpiderSubnet auto-pools serve the pods of a controller, and the request names none (Request.App is empty) "+
			"(Spiderpool: SpiderSubnet feature doesn't support no-controller pod)", ipam.ErrNotSupported)
	}
	objs, err := p.informer.GetIndexer().ByIndex(byApp, app.UID)
	if err != nil {
		return fail(err.Error(), ipam.ErrNotReady)
	}
	version := "IPv" + strconv.Itoa(family)
	var names, others []string
	for _, obj := range objs {
		m, err := metaAccessor(obj)
		if err != nil || m.GetDeletionTimestamp() != nil {
			continue
		}
		l := m.GetLabels()
		if l[subnet.LabelInterface] != iface || l[subnet.LabelIPVersion] != version {
			continue
		}
		if l[subnet.LabelOwnerSubnet] != subnetName {
			others = append(others, fmt.Sprintf("%q from subnet %q", m.GetName(), l[subnet.LabelOwnerSubnet]))
			continue
		}
		names = append(names, m.GetName())
	}
	slices.Sort(names)
	switch {
	case len(names) > 0:
		if _, ok := p.src.Pool(names[0]); !ok {
			return fail(fmt.Sprintf("the pool %q exists but is not loaded yet", names[0]), ipam.ErrNotReady)
		}
		return names[0], nil
	case len(others) > 0:
		slices.Sort(others)
		return fail(fmt.Sprintf("the pod names subnet %q, but its application's pool is %s", subnetName, others[0]), ipam.ErrNotSupported)
	}
	return fail("the application has no pool of this interface and family yet: the subnet runner creates it when it sees the application, "+
		"or logs why it cannot (ipamctl plan says so too)", ipam.ErrNotReady)
}
