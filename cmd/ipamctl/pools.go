package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ipamkit/ipam"
)

// runPools prints every pool's usage (ipam.Usage): its total (the addresses
// it can hand out), allocated, reserved and free, from one of three sources:
//
//   - manifests (-f): SpiderIPPools, with their status.allocatedIPs as the
//     claims, and SpiderReservedIPs;
//   - a live cluster (--kubeconfig): the same kinds, and the cluster's
//     IPClaims;
//   - a node's state directory (--cni-config, and --state-dir or the
//     directory the config names): host-local's range sets and the claim
//     files of that directory, through store/filestore (which takes the
//     directory's lock and leaves its index mark on it; no claim or cursor
//     file is written).
func runPools(ctx context.Context, args []string, in *input, stdout, stderr io.Writer, clock func() time.Time) int {
	var (
		out      = output("table")
		cniConf  string
		stateDir string
	)
	fs := newFlagSet("pools", stderr, in)
	fs.StringVar(&cniConf, "cni-config", "", "read a node's state: host-local's range sets from this CNI network config `file` (with --state-dir or its dataDir)")
	fs.StringVar(&stateDir, "state-dir", "", "with --cni-config, the network's state `directory` (default <ipam.dataDir>/<name>)")
	fs.Var(&out, "o", "output `format`: table or json")
	addKubeconfig(fs, in)
	if !hasFlag(args, "cni-config", "state-dir") {
		if code, ok := parseFlags(fs, args, in); !ok {
			return code
		}
	} else if code, ok := parseStateFlags(fs, args, in, &cniConf); !ok {
		return code
	}

	var (
		usages []ipam.Usage
		c      *cluster
		err    error
	)
	ctx, cancel := in.bound(ctx)
	defer cancel()
	if cniConf != "" {
		usages, err = stateUsage(ctx, cniConf, stateDir, clock())
	} else {
		usages, c, err = clusterUsage(ctx, in, clock())
	}
	if err != nil {
		if c != nil {
			printProblems(stderr, c)
		}
		fmt.Fprintf(stderr, "ipamctl pools: %v\n", err)
		return exitProblem
	}
	if out == "json" {
		err = writePoolsJSON(stdout, usages)
	} else {
		err = writePoolsTable(stdout, usages)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl pools: writing the output: %v\n", err)
		return exitProblem
	}
	if c != nil {
		return printProblems(stderr, c)
	}
	return exitOK
}

// hasFlag reports whether args set one of the flags names (as -name or
// --name, with or without =value).
func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		for _, n := range names {
			for _, p := range []string{"-" + n, "--" + n} {
				if a == p || len(a) > len(p) && a[:len(p)+1] == p+"=" {
					return true
				}
			}
		}
	}
	return false
}

// parseStateFlags parses the flags of a state directory's usage: a CNI
// config, and neither files nor a cluster.
func parseStateFlags(fs *flag.FlagSet, args []string, in *input, cniConf *string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "ipamctl pools: unexpected arguments %q\n", fs.Args())
	case len(in.files) > 0 || in.kubeconfig != "":
		fmt.Fprintln(fs.Output(), "ipamctl pools: --cni-config and --state-dir read a node's state: not with -f or --kubeconfig")
	case *cniConf == "":
		fmt.Fprintln(fs.Output(), "ipamctl pools: --state-dir needs --cni-config, which says the state directory's pools")
	default:
		return 0, true
	}
	return exitUsage, false
}

// clusterUsage reads manifests or a live cluster and returns the usage of
// its pools at now: the pools that go together (the others are problems),
// their claims (status.allocatedIPs and IPClaims) and the reservations, as
// explain allocates against them.
func clusterUsage(ctx context.Context, in *input, now time.Time) ([]ipam.Usage, *cluster, error) {
	c, err := in.cluster(ctx)
	if err != nil {
		return nil, nil, err
	}
	c.dropOverlaps()
	e, err := newExplainer(ctx, c, ipam.NetConf{}, now)
	if err != nil {
		return nil, c, err
	}
	us, err := e.alloc.Usage(ctx, now)
	return us, c, err
}

// writePoolsTable writes one row per pool.
func writePoolsTable(w io.Writer, us []ipam.Usage) error {
	t := newTable(w)
	fmt.Fprintln(t, "POOL\tFAMILY\tSUBNET\tTOTAL\tALLOCATED\tRESERVED\tFREE")
	for _, u := range us {
		fmt.Fprintf(t, "%s\tIPv%d\t%s\t%s\t%d\t%s\t%s\n", u.Pool, u.Family, u.Subnet, u.Capacity, u.Allocated, u.Reserved, u.Free)
	}
	return t.Flush()
}

// poolUsageJSON is one pool of -o json. The counts are JSON numbers written
// in full: an IPv6 pool's total may exceed 2^64 (read it as a big number).
type poolUsageJSON struct {
	Pool      string      `json:"pool"`
	Family    int         `json:"family"`
	Subnet    string      `json:"subnet"`
	Total     json.Number `json:"total"`
	Allocated int         `json:"allocated"`
	Reserved  json.Number `json:"reserved"`
	Free      json.Number `json:"free"`
}

func writePoolsJSON(w io.Writer, us []ipam.Usage) error {
	out := make([]poolUsageJSON, len(us))
	for i, u := range us {
		out[i] = poolUsageJSON{Pool: u.Pool, Family: u.Family, Subnet: u.Subnet.String(),
			Total: json.Number(u.Capacity.String()), Allocated: u.Allocated,
			Reserved: json.Number(u.Reserved.String()), Free: json.Number(u.Free.String())}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"pools": out})
}
