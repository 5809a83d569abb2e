// Package k8s converts Kubernetes API objects into the types of package ipam.
//
// The core module, github.com/ipamkit/ipam, imports no k8s.io package: CNI
// plugins built on it ship as small static binaries. A controller or webhook
// that already holds Kubernetes objects imports this nested module instead:
//
//   - LabelSelector and ToLabelSelector convert between a
//     metav1.LabelSelector and an ipam.LabelSelector, which has the same JSON
//     shape and meaning;
//   - Request builds an ipam.Request from a pod, its namespace and its node.
//
// The functions are pure: they copy what they keep, never modify their
// arguments, and are safe for concurrent use. Objects from an informer's
// cache may be passed as they are.
//
// Its subpackages talk to a live cluster through client-go:
//
//   - kubestore is a store.Store on IPClaim custom resources, one per
//     claimed address, whose CustomResourceDefinitions are in config/crd;
//   - kubepools is an ipam.PoolSource fed by informers from a Spiderpool
//     cluster's SpiderIPPool and SpiderReservedIP objects.
//
// Their tests run against a real API server in the test process, in the
// separate module k8s/kubetest, which users of this module never build.
package k8s
