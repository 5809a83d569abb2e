package kubesubnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

// This file turns Spiderpool's objects into the library's values and back:
// SpiderSubnets into subnet.Subnet, SpiderIPPools into ipam.Pool and
// subnet.AutoPool, and a subnet.AutoPool into the SpiderIPPool object
// Spiderpool's subnet controller writes.

// The resources the runner reads and writes (spiderpool.spidernet.io/v2beta1,
// cluster-scoped).
var (
	SubnetResource     = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spidersubnets"}
	IPPoolResource     = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spiderippools"}
	ReservedIPResource = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spiderreservedips"}
)

const apiVersion = "spiderpool.spidernet.io/v2beta1"

// specOf returns the spec of u as JSON, with the object's name inside it, so
// that the library's parsers name the object in their errors.
func specOf(u *unstructured.Unstructured) ([]byte, error) {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s %q: spec: missing or not an object", u.GetKind(), u.GetName())
	}
	m := maps.Clone(spec)
	m["name"] = u.GetName()
	return json.Marshal(m)
}

// Subnet reads a SpiderSubnet object: its spec, named after the object, and
// Terminating when the object is being deleted. It returns every problem of
// the spec at once (subnet.Parse).
func Subnet(u *unstructured.Unstructured) (*subnet.Subnet, error) {
	data, err := specOf(u)
	if err != nil {
		return nil, err
	}
	s, err := subnet.Parse(data)
	if err != nil {
		return nil, err
	}
	s.Terminating = u.GetDeletionTimestamp() != nil
	return s, nil
}

// Pool reads a SpiderIPPool object. When it is an auto-pool (it has the
// label subnet.LabelOwnerAppName), the *subnet.AutoPool is returned too, read
// from its labels and annotations (subnet.ParseAutoPool).
func Pool(u *unstructured.Unstructured) (*ipam.Pool, *subnet.AutoPool, error) {
	data, err := specOf(u)
	if err != nil {
		return nil, nil, err
	}
	p, err := ipam.ParsePool(data)
	if err != nil {
		return nil, nil, err
	}
	p.Terminating = u.GetDeletionTimestamp() != nil
	a, auto, err := subnet.ParseAutoPool(p, u.GetLabels(), u.GetAnnotations())
	if err != nil {
		return nil, nil, err
	}
	if !auto {
		return p, nil, nil
	}
	return p, a, nil
}

// ReservedIP reads a SpiderReservedIP object.
func ReservedIP(u *unstructured.Unstructured) (*ipam.ReservedIP, error) {
	data, err := specOf(u)
	if err != nil {
		return nil, err
	}
	r := new(ipam.ReservedIP)
	if err := json.Unmarshal(data, r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.Terminating = u.GetDeletionTimestamp() != nil
	return r, nil
}

// PoolObject returns the SpiderIPPool object of auto-pool a, as Spiderpool's
// subnet controller writes it: the spec (subnet, ips, gateway and routes of
// the subnet, podAffinity of the application), the labels of a.Labels, the
// annotation of a.Annotations, the finalizer subnet.Finalizer and,
// when subnetUID is set, a controller owner reference to the SpiderSubnet.
func PoolObject(a *subnet.AutoPool, subnetUID types.UID) (*unstructured.Unstructured, error) {
	if a == nil || a.Pool == nil {
		return nil, errors.New("no pool")
	}
	data, err := json.Marshal(a.Pool)
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, err
	}
	// Fields of the library's pool that are not SpiderIPPool spec fields.
	delete(spec, "name")
	delete(spec, "terminating")
	delete(spec, "strategy")
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(apiVersion)
	u.SetKind("SpiderIPPool")
	u.SetName(a.Name())
	u.SetLabels(a.Labels())
	u.SetAnnotations(a.Annotations())
	u.SetFinalizers([]string{subnet.Finalizer})
	if subnetUID != "" {
		yes := true
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: "SpiderSubnet", Name: a.Subnet, UID: subnetUID,
			Controller: &yes, BlockOwnerDeletion: &yes}})
	}
	return u, nil
}
