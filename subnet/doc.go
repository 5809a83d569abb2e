// Package subnet is Spiderpool's SpiderSubnet: pools created, resized and
// deleted per application (auto-pools) from the addresses of a subnet.
//
// Use it: give a Manager the subnets and the Allocator's Store, make the
// Allocator with the Manager as its PoolSource, and tell the Manager about
// applications as they come and go; a pod names its application in
// ipam.Request.App.
//
//	m, err := subnet.NewManager(subnet.ManagerOptions{
//		Subnets: []*subnet.Subnet{subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16",
//			"ips":["10.6.168.101-10.6.168.110"]}`)},
//		Claims: claims, // the Allocator's Store
//	})
//	alloc, err := ipam.NewAllocator(ipam.Options{Pools: m, Store: claims})
//	decisions, err := m.SetApplication(ctx, subnet.Application{AppRef: app,
//		Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-6"]}`}, Replicas: &n})
//	res, err := alloc.Allocate(ctx, ipam.Request{..., App: app, Annotations: ...})
//
// The parts, in the order a reader meets them:
//
//   - subnet.go: the SpiderSubnet spec (Subnet, Parse), its admission rules
//     (ValidateAll, ValidateUpdate) and its status (StatusOf).
//   - autopool.go: the applications that ask for auto-pools (Application,
//     the annotations read by ParseConfig and ParseIPNumber) and the
//     auto-pools themselves (AutoPool), with Spiderpool's names, labels and
//     podAffinity.
//   - decide.go: Decide, a pure function from applications and what exists
//     (a Snapshot) to one Decision per auto-pool: create, grow,
//     shrink, update, keep, wait, terminate, delete, or fail saying why.
//   - manager.go: Manager applies those decisions in memory and serves the
//     pools to an Allocator, at once: a pod whose pool is not ready gets an
//     error wrapping ipam.ErrNotReady that says why.
//
// k8s/kubesubnet runs the same decisions on a live cluster, as SpiderIPPool
// objects; ipamctl plan runs them on manifests. Where the library differs
// from Spiderpool, the difference is spelled out at the rule and listed in
// the module's README (differences 14-24).
package subnet
