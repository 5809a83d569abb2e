// Package k8s converts Kubernetes API objects into the types of package ipam.
//
// The core module, github.com/ipamkit/ipam, imports no k8s.io package: CNI
// plugins built on it ship as small static binaries. A controller or webhook
// that already holds Kubernetes objects imports this nested module instead:
//
//   - LabelSelector and ToLabelSelector convert between a
//     metav1.LabelSelector and an ipam.LabelSelector, which has the same JSON
//     shape and meaning;
//   - Request builds an ipam.Request from a pod, its namespace and its node;
//     App finds the pod's application (its top controller, for
//     ipam.Request.App) from its owner reference and, for a ReplicaSet or
//     a Job, that owner's;
//   - Application turns a Deployment, ReplicaSet, StatefulSet, DaemonSet,
//     Job or CronJob into the ipam.Application whose SpiderSubnet auto-pools
//     ipam.DecideAutoPools and ipam.SubnetManager decide.
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
//     cluster's SpiderIPPool and SpiderReservedIP objects;
//   - kubesubnet runs SpiderSubnet on a cluster: a Runner (a controller,
//     leader-elected) creates, resizes and deletes the auto-pools of
//     applications as SpiderIPPool objects by ipam.SubnetManager's
//     decisions, and Pools finds an application's auto-pool for an
//     allocator at once.
//
// Their tests run against a real API server in the test process, in the
// separate module k8s/kubetest, which users of this module never build.
package k8s
