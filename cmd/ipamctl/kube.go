package main

import (
	"context"
	"fmt"
	"io"

	"github.com/ipamkit/ipam/k8s/kubestore"
)

// runKube runs "ipamctl kube SUBCOMMAND": what concerns the IPClaims of a
// cluster themselves. Its one subcommand, migrate, moves IPClaims named by
// pool and address (before claims were named by address alone) to the
// current layout (kubestore.Store.Migrate).
func runKube(ctx context.Context, args []string, in *input, stdout, stderr io.Writer) int {
	const usage = "usage: ipamctl kube migrate [CLUSTER]\n\nmigrate moves the cluster's IPClaims named by pool and address to the\nlayout of this version: named by address, with owner indexes\n"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprint(stderr, usage)
		return exitOK
	case len(args) == 0 || args[0] != "migrate":
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	fs := newFlagSet("kube migrate", stderr, in)
	addKubeconfig(fs, in)
	if code, ok := parseFlags(fs, args[1:], in); !ok {
		return code
	}
	if !in.live {
		fmt.Fprintln(stderr, "ipamctl kube migrate: needs a cluster (--kubeconfig, --context, $KUBECONFIG or ~/.kube/config), not files")
		return exitUsage
	}
	ctx, cancel := in.bound(ctx)
	defer cancel()
	cfg, err := in.restConfig()
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl kube migrate: %v\n", err)
		return exitProblem
	}
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl kube migrate: %v\n", err)
		return exitProblem
	}
	res, err := st.Migrate(ctx)
	fmt.Fprintf(stdout, "moved %d IPClaims\n", res.Moved)
	for _, e := range res.Left {
		fmt.Fprintf(stdout, "left: %v\n", e)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl kube migrate: %v\n", err)
		return exitProblem
	}
	if !res.Marked {
		fmt.Fprintf(stderr, "ipamctl kube migrate: %d IPClaims left as they were: stores write no claim until none is left\n", len(res.Left))
		return exitProblem
	}
	fmt.Fprintln(stdout, "the cluster's IPClaims are all named by address")
	return exitOK
}
