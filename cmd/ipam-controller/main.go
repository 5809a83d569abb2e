// Command ipam-controller is the cluster-wide controller of the library's
// Kubernetes parts, in one supported program:
//
//   - garbage collection of pod claims (k8s/kubegc): the claims of pods that
//     are gone, finished, or re-created are released by the rules of
//     gc.Decide;
//   - the SpiderSubnet runner (k8s/kubesubnet): applications' auto-pools
//     created, resized and deleted as SpiderIPPool objects;
//   - Kubernetes Events for what they do and what waits;
//   - /healthz, /readyz (the informers have synced) and /metrics (Prometheus).
//
// One replica leads (client-go leader election with a Lease); the others
// stand by, with their informers synced, and take over when the leader
// stops or loses its lease. Every part reads one shared informer factory
// (and one dynamic factory for the Spiderpool kinds). SIGTERM and SIGINT
// stop it: the leader stops its work, then gives its lease up so that a
// standby takes over at once. A replica that loses its lease exits with
// status 1, to start afresh.
//
// See README.md for the flags, the RBAC it needs and its metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/k8s/kubeusage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	kubeconfig, context string
	qps                 float64
	burst               int

	listen string

	leaderElect                               bool
	leaseName, leaseNamespace, identity       string
	leaseDuration, renewDeadline, retryPeriod time.Duration

	gc            bool
	gcPeriod      time.Duration
	gcGraceDelay  time.Duration
	subnet        bool
	subnetKinds   []string
	subnetWorkers int

	usage            bool
	usageInterval    time.Duration
	lowFreePercent   float64
	lowFreeAddresses uint64

	logLevel slog.Level
	logJSON  bool
}

// parseFlags reads args; errors name the flag and its value.
func parseFlags(args []string, stderr io.Writer) (*config, bool, error) {
	fs := flag.NewFlagSet("ipam-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	version := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `file`; default: $KUBECONFIG, then ~/.kube/config, then the pod's service account (in-cluster)")
	fs.StringVar(&c.context, "context", "", "kubeconfig `context` to use; default: its current context")
	fs.Float64Var(&c.qps, "kube-api-qps", 50, "requests per second to the API server (client-side limit)")
	fs.IntVar(&c.burst, "kube-api-burst", 100, "burst of requests to the API server")
	fs.StringVar(&c.listen, "listen", ":8080", "`address` of /healthz, /readyz and /metrics")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "elect one leader among the replicas with a Lease; false: run alone")
	fs.StringVar(&c.leaseName, "lease-name", "ipam-controller", "`name` of the Lease")
	fs.StringVar(&c.leaseNamespace, "lease-namespace", "", "`namespace` of the Lease; default: the kubeconfig context's namespace, or the pod's (in-cluster)")
	fs.StringVar(&c.identity, "id", "", "this replica's `identity` in the Lease; default: the host name and the process ID")
	fs.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "how long a standby waits before taking a lease not renewed")
	fs.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up")
	fs.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "time between tries to take or renew the lease")
	fs.BoolVar(&c.gc, "gc", true, "collect the claims of pods that are gone (kubegc)")
	fs.DurationVar(&c.gcPeriod, "gc-period", 5*time.Minute, "time between full garbage collection passes")
	fs.DurationVar(&c.gcGraceDelay, "gc-additional-grace-delay", 0, "time added to a terminating pod's grace period before its claims go (Spiderpool's additionalGracePeriod)")
	fs.BoolVar(&c.subnet, "subnet", true, "run SpiderSubnet: the auto-pools of applications (kubesubnet)")
	kinds := fs.String("subnet-kinds", "", "comma-separated `kinds` of applications followed for auto-pools; default: all six (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob)")
	fs.IntVar(&c.subnetWorkers, "subnet-workers", 0, "application changes applied at once; 0: kubesubnet's default")
	fs.BoolVar(&c.usage, "usage", true, "write the SpiderIPPools' and SpiderSubnets' count columns (status.allocatedIPCount, status.totalIPCount) and PoolNearlyExhausted Events (kubeusage)")
	fs.DurationVar(&c.usageInterval, "usage-interval", kubeusage.DefaultInterval, "time between two usage passes: the least time between two status writes of one pool")
	fs.Float64Var(&c.lowFreePercent, "pool-low-free-percent", kubeusage.DefaultLowFreePercent, "a pool with fewer free addresses than this `percent` of what it can hand out is nearly exhausted (an Event)")
	fs.Uint64Var(&c.lowFreeAddresses, "pool-low-free-addresses", 0, "if not 0, a pool with fewer free addresses than this `count` is nearly exhausted, instead of --pool-low-free-percent")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON lines instead of text")
	if err := fs.Parse(args); err != nil {
		return nil, false, err
	}
	if fs.NArg() > 0 {
		return nil, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *version {
		return c, true, nil
	}
	var errs []error
	if err := c.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel))
	}
	if *kinds != "" {
		c.subnetKinds = strings.Split(*kinds, ",")
	}
	if c.qps <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: must be positive", c.qps))
	}
	if c.burst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: must be positive", c.burst))
	}
	if c.gcPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--gc-period %v: must be positive", c.gcPeriod))
	}
	if c.gcGraceDelay < 0 {
		errs = append(errs, fmt.Errorf("--gc-additional-grace-delay %v: negative", c.gcGraceDelay))
	}
	if c.usageInterval <= 0 {
		errs = append(errs, fmt.Errorf("--usage-interval %v: must be positive", c.usageInterval))
	}
	if !(c.lowFreePercent > 0 && c.lowFreePercent <= 100) {
		errs = append(errs, fmt.Errorf("--pool-low-free-percent %v: want more than 0, at most 100", c.lowFreePercent))
	}
	if c.subnetWorkers < 0 {
		errs = append(errs, fmt.Errorf("--subnet-workers %d: negative", c.subnetWorkers))
	}
	if c.leaderElect {
		if c.leaseName == "" {
			errs = append(errs, errors.New("--lease-name: empty"))
		}
		if !(c.leaseDuration > c.renewDeadline && c.renewDeadline > c.retryPeriod && c.retryPeriod > 0) {
			errs = append(errs, fmt.Errorf("--lease-duration %v, --renew-deadline %v, --retry-period %v: want lease-duration > renew-deadline > retry-period > 0",
				c.leaseDuration, c.renewDeadline, c.retryPeriod))
		}
	}
	for _, k := range c.subnetKinds {
		if !validKind(k) {
			errs = append(errs, fmt.Errorf("--subnet-kinds: kind %q: not one of %s", k, strings.Join(allKinds, ", ")))
		}
	}
	if !c.gc && !c.subnet && !c.usage {
		errs = append(errs, errors.New("--gc=false, --subnet=false and --usage=false: nothing to run"))
	}
	return c, false, errors.Join(errs...)
}

var allKinds = []string{kubesubnet.KindDeployment, kubesubnet.KindReplicaSet, kubesubnet.KindStatefulSet,
	kubesubnet.KindDaemonSet, kubesubnet.KindJob, kubesubnet.KindCronJob}

func validKind(k string) bool {
	for _, a := range allKinds {
		if k == a {
			return true
		}
	}
	return false
}

// version returns the module's version as the build recorded it:
// "v0.1.0" for go install ...@v0.1.0, "(devel)" for a build in the
// repository, with the VCS revision when there is one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v + " " + bi.GoVersion
}

func run(args []string, stdout, stderr io.Writer) int {
	c, showVersion, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "ipam-controller:", err)
		return 2
	}
	if showVersion {
		fmt.Fprintln(stdout, "ipam-controller", version())
		return 0
	}
	hopts := &slog.HandlerOptions{Level: c.logLevel}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if c.logJSON {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(h)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = controller(ctx, c, log)
	switch {
	case errors.Is(err, errLostLease):
		log.Error("ipam-controller: lost the lease; exiting to start afresh")
		return 1
	case err != nil:
		log.Error("ipam-controller", "err", err)
		return 1
	}
	log.Info("ipam-controller: stopped")
	return 0
}

// gcOptions are the garbage collection rules of the flags.
func (c *config) gcOptions() gc.Options {
	return gc.Options{AdditionalGraceDelay: c.gcGraceDelay}
}
