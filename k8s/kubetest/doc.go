// Package kubetest runs a real Kubernetes API server inside a test process,
// for the tests of the k8s module and of anything built on it (the claim
// Store, pool sources fed by informers, garbage collectors that watch pods).
//
// The server is k8s.io/apiextensions-apiserver, the code kube-apiserver runs
// for custom resources (generic registry, watch cache, etcd3 storage,
// consistent reads from the cache), on an embedded etcd
// (go.etcd.io/etcd/server/v3/embed), both listening on 127.0.0.1 only. Beside
// custom resources it serves, through the same generic registry, the
// built-in kinds a controller of IP addresses reads: pods, nodes and
// namespaces (core/v1), the applications whose pods get auto-pools
// (StatefulSets, Deployments, ReplicaSets, DaemonSets in apps/v1, Jobs and
// CronJobs in batch/v1), and the Leases (coordination.k8s.io/v1) and Events
// (events.k8s.io/v1) a controller writes for leader election and to tell
// what it did; and the kinds install manifests hold, so that they can be
// created as typed objects: ServiceAccounts, ConfigMaps and Services
// (core/v1), PodDisruptionBudgets (policy/v1), and ClusterRoles,
// ClusterRoleBindings, Roles and RoleBindings (rbac.authorization.k8s.io/v1,
// stored, not enforced). Nothing is downloaded and no binary is run.
//
// This is a module of its own, github.com/ipamkit/ipam/k8s/kubetest, so that
// users of the k8s module never compile it: its test binary links about 1,500
// packages (a cold build takes 4–5 minutes on two cores, the binary is about
// 130 MB).
//
// # Use
//
// Start one Server per test package, in TestMain, and install every
// CustomResourceDefinition the package needs in one InstallCRDs call:
//
//	var srv *kubetest.Server
//
//	func TestMain(m *testing.M) { os.Exit(run(m)) }
//
//	func run(m *testing.M) int {
//		s, err := kubetest.Start(kubetest.Options{})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			return 1
//		}
//		defer s.Close()
//		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//		defer cancel()
//		if err := s.InstallCRDs(ctx, append(crd.Manifests(), kubetest.SpiderpoolCRDs()...)...); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			return 1
//		}
//		srv = s
//		return m.Run()
//	}
//
// Tests then make clients from srv.Config(), which has no client-side rate
// limit (QPS -1), or hand srv.Kubeconfig() to a program they run, and share
// the server: a test that needs an empty store
// deletes what it left (tests of one package run one after another unless
// they call t.Parallel).
//
// # The module's own tests
//
// One server serves every test of the package kubetest_test: storetest and
// the Store's faults (kubestore), pool sources and their edits (kubepools),
// two garbage collectors at once (kubegc), the CNI plugin built with
// -tags kubernetes and ipamctl run as programs through Kubeconfig, and two
// allocator processes (the test binary run again: TestMain hands a process
// started with KUBETEST_CHILD set to the child's code instead of starting a
// server) with pool edits and an API server restart;
// -twoproc.duration lengthens that run for a soak. BenchmarkClaims sets
// Allocators against raw creates on one pool.
//
// # Requests and tokens
//
// The server records each distinct resource request it serves (verb, group,
// resource, subresource, namespace, name, with the client's User-Agent and
// user): Requests lists them, for a test that checks a program's requests
// against the RBAC rules it ships with (this module's TestPlugin and
// TestControllerProgram check deploy/'s). Options.Tokens turns bearer-token
// authentication on: a token it refuses (an expired one) gets 401, while
// requests without a token stay allowed.
//
// # Faults
//
// StopAPI stops the API server as a crash would: open connections and
// watches are cut, new connections are refused. StartAPI starts it again on
// the same address with the same certificate, so clients (and their
// rest.Config) keep working without being re-created, and etcd keeps every
// object, CRD included. Connections to the stopped server fail at once
// (connection refused); a test of deadlines against a server that never
// answers can point a client at a listener that never accepts.
//
// # Scale
//
// Seed writes many objects straight into etcd, under the API server's keys
// and in the form it stores them (a new uid, the creation time, generation
// 1 for custom resources, the managed fields of the create), without
// admission, validation or defaulting: 50,000 IPClaims in about a minute
// on two loaded cores, where creates through the API would take several.
// Build the objects with the client whose writes they stand for, through a
// Recorder: a rest.Config whose requests never leave the process, that
// answers creates and keeps the objects sent. Objects seeded while the API server is stopped (StopAPI) are loaded in
// one list when it starts again; seeded while it runs, its watch cache
// follows them one event at a time. RequestCounts counts the requests the
// API server served, by client (its user agent), verb and resource, for
// every client, those in other processes included.
//
// The module's tests use them for the scale harness of issue 27:
// BenchmarkClusterScale seeds -scale.claims IPClaims (as kubestore writes
// them, checked by TestSeedMatchesStore) over 100 SpiderIPPools and
// measures the plugin's and the node agent's ADD and DEL at each count;
// TestClusterFault churns pods through both while plugins, agents and the
// API server are killed (see benchmarks/README.md).
//
// # Timing, measured on a 2-core machine
//
// Start takes 0.3–0.7 s (etcd ready in under 0.1 s, then /healthz). Close
// and StopAPI cut connections rather than wait for them, and take a few
// milliseconds; StartAPI about 0.3–0.6 s. InstallCRDs waits until each CRD
// is Established and served (tens of milliseconds), then until two seconds
// have passed since, because the API server delays each create of a custom
// resource by two seconds while its CRD was Established less than two
// seconds ago (a guard against skew between HA servers in
// apiextensions-apiserver). Objects are stored with fsync off.
//
// # Differences from kube-apiserver
//
// The built-in kinds have no defaulting, no validation, no status
// subresource (status is written by a plain Update) and no graceful deletion
// (a Delete is immediate; a finalizer and a Delete leave a terminating pod).
// Pods can be selected by the fields spec.nodeName and status.phase, nodes
// and the others by metadata.name (and metadata.namespace). No admission
// plugins, webhooks or controllers run: Spiderpool objects must be written
// as its webhook would leave them, and ownerReferences cascade nothing.
// Every request is allowed, without credentials (with Options.Tokens, a
// request that carries a token the function refuses is not); RBAC objects
// are stored but not enforced. /readyz never reports ready
// (its informer-sync check waits for a core API the server does not have):
// Start waits on /healthz. The server logs through klog, which is global to
// the process: Start sends it to Options.Log, or discards it.
package kubetest
