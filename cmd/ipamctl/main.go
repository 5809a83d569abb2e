// Command ipamctl reads Kubernetes manifests (SpiderIPPools, SpiderReservedIPs,
// SpiderSubnets, Namespaces, Nodes, Pods and the controllers of pods, as files
// or as `kubectl get -o yaml` prints them) and answers questions with the ipam library:
//
//	ipamctl explain (-f FILE... | CLUSTER) [--pod NS/NAME] [--cni-config FILE] [-o table|json]
//	ipamctl validate -f FILE...
//	ipamctl gc (-f FILE... [--now RFC3339] | CLUSTER [--release]) [-o table|json]
//	ipamctl plan -f FILE... [--default-ip-number N|+N] [-o table|json]
//	ipamctl pools (-f FILE... | CLUSTER | --cni-config FILE [--state-dir DIR]) [-o table|json]
//	ipamctl who ADDRESS (-f FILE... | CLUSTER | --cni-config FILE [--state-dir DIR]) [-o table|json]
//	ipamctl version
//
// explain allocates every pod, in file order, against one in-memory store
// that holds the pools' existing claims (status.allocatedIPs), and prints for
// each pod and interface the address it gets or the error, and the trace: every
// pool considered, the rule that made it a candidate, the filter that rejected
// it, and its rank. validate checks every pool alone and against the others.
// gc says which existing claims the garbage collection rules would release,
// and why. plan says which SpiderSubnet auto-pools each application
// (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob) needs, with
// their addresses and labels, and each SpiderSubnet's counts once they are
// made. pools prints each pool's usage; who, who holds an address; version,
// the version of module github.com/ipamkit/ipam/cmd the binary was built
// from ("(devel)" for a build in a workspace). See README.md for the output
// formats.
//
// Input is read from files or standard input (-f -), each up to -max-input;
// a List is read item by item, objects of kinds ipamctl does not read are
// skipped with a note, and explain writes each pod's answer as soon as it has
// it. Without -f, explain, gc, pools and who read a live cluster instead
// (CLUSTER: [--kubeconfig FILE] [--context NAME] [--timeout D] [--quiet],
// found with client-go's kubeconfig rules: --kubeconfig, else $KUBECONFIG,
// else ~/.kube/config), through its API server: the same kinds, and the
// cluster's IPClaims, with a progress line on stderr for long reads; gc
// --release then releases the IPClaims it judges releasable, each at the
// revision it judged. Nothing else writes to a cluster.
//
// Named kubectl-ipam, the program is the kubectl plugin "kubectl ipam", and
// names itself so.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
	"github.com/ipamkit/ipam/cmd/internal/limited"
)

func main() {
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	code := runProg(context.Background(), progName(os.Args[0]), os.Args[1:], os.Stdin, out, os.Stderr, time.Now)
	if err := out.Flush(); err != nil && code == exitOK {
		fmt.Fprintf(os.Stderr, "ipamctl: writing the output: %v\n", err)
		code = exitProblem
	}
	os.Exit(code)
}

// usageText is the text of "ipamctl help", naming the program prog
// ("ipamctl", or "kubectl ipam" as a kubectl plugin).
func usageText(prog string) string {
	return strings.ReplaceAll(usage, "ipamctl", prog)
}

const usage = `usage: ipamctl <command> [flags]

commands:
  explain   which pool and address each pod gets, and why
            (-f FILE... | CLUSTER) [--pod NS/NAME] [--cni-config FILE] [-o table|json]
  validate  check every pool alone and against the others
            -f FILE...
  gc        which existing claims garbage collection would release, and why
            (-f FILE... [--now RFC3339] | CLUSTER [--release]) [-o table|json]
  plan      the SpiderSubnet auto-pools each application needs, and each
            subnet's counts
            -f FILE... [--default-ip-number N|+N] [-o table|json]
  pools     each pool's total, allocated, reserved and free addresses
            (-f FILE... | CLUSTER | --cni-config FILE [--state-dir DIR]) [-o table|json]
  who       who holds an address, in which pool
            ADDRESS (-f FILE... | CLUSTER | --cni-config FILE [--state-dir DIR]) [-o table|json]
  kube      kube migrate: move IPClaims named by pool and address (before
            claims were named by address) to this version's layout
            CLUSTER
  version   the version of ipamctl

FILE is YAML or JSON, one or more documents, or a List as kubectl prints it;
"-" is standard input. Each is read up to -max-input (default 256MiB).
CLUSTER is [--kubeconfig FILE] [--context NAME] [--timeout D] [--quiet]: a
live cluster, its objects and its IPClaims, found as kubectl finds it
(--kubeconfig, else $KUBECONFIG, else ~/.kube/config); without -f, a command
reads the cluster when one is found.
Run "ipamctl <command> -h" for a command's flags.
`

// Exit codes.
const (
	exitOK      = 0
	exitProblem = 1 // the input has problems (what could be read was used)
	exitUsage   = 2
)

// run runs one command and returns the exit code. "-f -" reads stdin; clock
// gives the time when gc is not told it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, clock func() time.Time) int {
	return runProg(ctx, "ipamctl", args, stdin, stdout, stderr, clock)
}

// runProg is run for the program named prog: "kubectl ipam" (progName)
// names itself so in its usage and in its messages on stderr.
func runProg(ctx context.Context, prog string, args []string, stdin io.Reader, stdout, stderr io.Writer, clock func() time.Time) int {
	usage := usageText(prog)
	in := &input{maxInput: defaultMaxInput, stdin: stdin, getenv: environ}
	in.progress = newProgress(stderr, clock) // a terminal if stderr is one
	if prog != "ipamctl" {
		stderr = &renamer{w: stderr, to: prog}
		in.progress.w = stderr
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "explain":
		return runExplain(ctx, args[1:], in, stdout, stderr, clock)
	case "validate":
		return runValidate(args[1:], in, stdout, stderr)
	case "gc":
		return runGC(ctx, args[1:], in, stdout, stderr, clock)
	case "plan":
		return runPlan(args[1:], in, stdout, stderr)
	case "pools":
		return runPools(ctx, args[1:], in, stdout, stderr, clock)
	case "who":
		return runWho(ctx, args[1:], in, stdout, stderr, clock)
	case "kube":
		return runKube(ctx, args[1:], in, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "ipamctl %s\n", buildinfo.Version())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ipamctl: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// output is the -o flag.
type output string

func (o *output) String() string { return string(*o) }

func (o *output) Set(s string) error {
	if s != "table" && s != "json" {
		return fmt.Errorf("%q: want table or json", s)
	}
	*o = output(s)
	return nil
}

// parseFlags parses a command's flags, requiring at least one -f and no
// arguments. ok is false when the command should exit with code.
func parseFlags(fs *flag.FlagSet, args []string, in *input) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "ipamctl %s: unexpected arguments %q (name files with -f)\n", fs.Name(), fs.Args())
		return exitUsage, false
	}
	if fs.Lookup("kubeconfig") != nil {
		in.chooseLive()
	}
	switch {
	case len(in.files) > 0 && in.clusterNamed():
		fmt.Fprintf(fs.Output(), "ipamctl %s: -f and --kubeconfig or --context: read files or a cluster, not both\n", fs.Name())
		return exitUsage, false
	case len(in.files) == 0 && !in.live:
		fmt.Fprintf(fs.Output(), "ipamctl %s: no input: name at least one file with -f%s\n", fs.Name(), orCluster(fs))
		return exitUsage, false
	case fs.Lookup("timeout") != nil && in.timeout <= 0:
		// A deadline of none would wait forever for a server that does
		// not answer.
		fmt.Fprintf(fs.Output(), "ipamctl %s: --timeout %s: want a positive duration, such as %s (the default)\n", fs.Name(), in.timeout, defaultTimeout)
		return exitUsage, false
	}
	return 0, true
}

// orCluster says how to name a cluster instead, for the commands that can
// read one.
func orCluster(fs *flag.FlagSet) string {
	if fs.Lookup("kubeconfig") == nil {
		return ""
	}
	return ", or a cluster with --kubeconfig, --context, $KUBECONFIG or ~/.kube/config"
}

// addKubeconfig gives a command the flags of a cluster: --kubeconfig,
// --context, --timeout and --quiet.
func addKubeconfig(fs *flag.FlagSet, in *input) {
	fs.StringVar(&in.kubeconfig, "kubeconfig", "", "read the objects and IPClaims of the cluster this kubeconfig `file` names, instead of $KUBECONFIG or ~/.kube/config (without -f, a cluster they name is read)")
	fs.StringVar(&in.kubeContext, "context", "", "the kubeconfig context `name` to use (default: the current context)")
	fs.DurationVar(&in.timeout, "timeout", defaultTimeout, "give up on the cluster after this `duration` (positive)")
	fs.BoolVar(&in.progress.quiet, "quiet", false, "write no progress line on stderr while reading a cluster or a node's state directory")
}

// environ reads the environment of the process: $KUBECONFIG and $HOME
// tell where a cluster is (the tests of this package hide them).
var environ = os.Getenv

// defaultTimeout bounds what a command asks of a cluster.
const defaultTimeout = time.Minute

func newFlagSet(name string, stderr io.Writer, in *input) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&in.files, "f", "read manifests from this `file` (YAML or JSON; - for standard input; repeatable)")
	fs.Var(&in.maxInput, "max-input", "read at most this `size` of each file, such as 64MiB or 1GiB")
	return fs
}

func runExplain(ctx context.Context, args []string, in *input, stdout, stderr io.Writer, clock func() time.Time) int {
	var (
		out     = output("table")
		pod     string
		cniConf string
	)
	fs := newFlagSet("explain", stderr, in)
	fs.StringVar(&pod, "pod", "", "print only the pod `namespace/name` (the pods before it are still allocated first)")
	fs.StringVar(&cniConf, "cni-config", "", "read default_ipv4_ippool, default_ipv6_ippool and clean_gateway from this CNI network config `file`")
	fs.Var(&out, "o", "output `format`: table or json")
	addKubeconfig(fs, in)
	if code, ok := parseFlags(fs, args, in); !ok {
		return code
	}
	var nc ipam.NetConf
	if cniConf != "" {
		data, err := limited.ReadFile(cniConf, limited.MaxFile)
		if errors.Is(err, limited.ErrTooLarge) {
			err = fmt.Errorf("%s: %w", cniConf, err)
		}
		if err == nil {
			nc, err = loadNetConf(cniConf, data)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ipamctl explain: --cni-config: %v\n", err)
			return exitProblem
		}
	}
	want := pod
	if want != "" && !strings.Contains(want, "/") {
		want = "default/" + want
	}

	ctx, cancel := in.bound(ctx)
	defer cancel()
	c, err := in.cluster(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl explain: %v\n", err)
		return exitProblem
	}
	c.dropOverlaps()
	e, err := newExplainer(ctx, c, nc, clock())
	if err != nil {
		printProblems(stderr, c)
		fmt.Fprintf(stderr, "ipamctl explain: %v\n", err)
		return exitProblem
	}
	var w reportWriter = newTableWriter(stdout)
	if out == "json" {
		w = &jsonWriter{w: stdout}
	}
	found, pods := false, 0
	err = e.explainAll(ctx, func(r *podReport) (more bool, err error) {
		pods++
		if want == "" {
			return true, w.write(r)
		}
		if r.pod.pod.Namespace+"/"+r.pod.pod.Name != want {
			return true, nil
		}
		found = true
		return false, w.write(r) // the pods after it cannot change its answer
	})
	if err == nil && want != "" && !found {
		printProblems(stderr, c)
		fmt.Fprintf(stderr, "ipamctl explain: --pod %s: no such pod in the input\n", want)
		return exitProblem
	}
	if err == nil {
		err = w.close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl explain: writing the output: %v\n", err)
		return exitProblem
	}
	code := printProblems(stderr, c)
	if pods == 0 {
		// An empty table would say nothing: say why, as kubectl says "No
		// resources found", and succeed, as kubectl does.
		fmt.Fprintf(stderr, "ipamctl explain: no pods in the input: nothing to explain\n")
	}
	return code
}

// printProblems writes the notes and the input problems to w and returns the
// exit code the problems call for.
func printProblems(w io.Writer, c *cluster) int {
	c.printNotes(w)
	if len(c.problems) == 0 {
		return exitOK
	}
	fmt.Fprintf(w, "ipamctl: %s in the input (the rest was used):\n", plural(len(c.problems), "problem"))
	for _, p := range c.sortedProblems() {
		fmt.Fprintf(w, "  %s\n", p)
	}
	return exitProblem
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
