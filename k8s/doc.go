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
//     Job or CronJob into the subnet.Application whose SpiderSubnet auto-pools
//     subnet.Decide and subnet.Manager decide.
//
// The functions are pure: they copy what they keep, never modify their
// arguments, and are safe for concurrent use. Objects from an informer's
// cache may be passed as they are.
//
// GCPod, GCStatefulSet and NodeReady describe pods, StatefulSets and nodes
// as gc.Decide judges them.
//
// Its subpackages talk to a live cluster through client-go:
//
//   - kubestore is a store.Store on IPClaim custom resources, one per
//     claimed address, whose CustomResourceDefinitions are in config/crd;
//   - kubepools is an ipam.PoolSource fed by informers from a Spiderpool
//     cluster's SpiderIPPool and SpiderReservedIP objects (or read once);
//   - kubegc is a garbage collector of pod claims: informers on pods,
//     StatefulSets and nodes, gc.Decide, releases through the Store,
//     safe to run as several replicas;
//   - kubeclient reads pods, namespaces, nodes and StatefulSets without
//     client-go's generated clientset, and finds a cluster's client config;
//   - kubesubnet runs SpiderSubnet on a cluster: a Runner (a controller,
//     leader-elected) creates, resizes and deletes the auto-pools of
//     applications as SpiderIPPool objects by subnet.Manager's
//     decisions, and Pools finds an application's auto-pool for an
//     allocator at once.
//
// kubestore, kubepools, kubegc and kubeclient do not import client-go's
// generated clientset (k8s.io/client-go/kubernetes) or its informers, which
// register every API group at start-up (TestImportGraph keeps it so).
//
// Their tests run against a real API server in the test process, in the
// separate module k8s/kubetest, which users of this module never build;
// examples/kubecontroller puts them together.
package k8s
