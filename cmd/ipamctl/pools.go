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
	"github.com/ipamkit/ipam/store"
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
	out := output("table")
	fs := newFlagSet("pools", stderr, in)
	fs.Var(&out, "o", "output `format`: table or json")
	var src source
	src.flags(fs, in)
	if code, ok := src.parse(fs, args, in, false); !ok {
		return code
	}
	ctx, cancel := in.bound(ctx)
	defer cancel()
	now := clock()
	a, c, _, done, err := src.open(ctx, in, now)
	var usages []ipam.Usage
	if err == nil {
		defer done()
		usages, err = a.Usage(ctx, now)
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

// source is where pools and who hold their addresses are read: manifests,
// a live cluster, or a node's state directory.
type source struct {
	cniConf, stateDir string
}

// flags adds the flags of every source to fs.
func (s *source) flags(fs *flag.FlagSet, in *input) {
	fs.StringVar(&s.cniConf, "cni-config", "", "read a node's state: host-local's range sets from this CNI network config `file` (with --state-dir or its dataDir)")
	fs.StringVar(&s.stateDir, "state-dir", "", "with --cni-config, the network's state `directory` (default <ipam.dataDir>/<name>)")
	addKubeconfig(fs, in)
}

// parse parses args, which name one source; with arg, the command takes
// one argument (which parse leaves in fs.Args).
func (s *source) parse(fs *flag.FlagSet, args []string, in *input, arg bool) (code int, ok bool) {
	if !arg && !hasFlag(args, "cni-config", "state-dir") {
		return parseFlags(fs, args, in)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	want := 0
	if arg {
		want = 1
	}
	state := s.cniConf != "" || s.stateDir != ""
	if !state {
		in.chooseLive()
	}
	switch {
	case fs.NArg() != want:
		fmt.Fprintf(fs.Output(), "ipamctl %s: want %s, got %q\n", fs.Name(), plural(want, "argument"), fs.Args())
	case state && (len(in.files) > 0 || in.clusterNamed()):
		fmt.Fprintf(fs.Output(), "ipamctl %s: --cni-config and --state-dir read a node's state: not with -f, --kubeconfig or --context\n", fs.Name())
	case state && s.cniConf == "":
		fmt.Fprintf(fs.Output(), "ipamctl %s: --state-dir needs --cni-config, which says the state directory's pools\n", fs.Name())
	case !state && len(in.files) > 0 && in.clusterNamed():
		fmt.Fprintf(fs.Output(), "ipamctl %s: -f and --kubeconfig or --context: read files or a cluster, not both\n", fs.Name())
	case !state && len(in.files) == 0 && !in.live:
		fmt.Fprintf(fs.Output(), "ipamctl %s: no input: name files with -f, a cluster with --kubeconfig, --context, $KUBECONFIG or ~/.kube/config, or a node's state with --cni-config\n", fs.Name())
	default:
		return 0, true
	}
	return exitUsage, false
}

// open reads the source into an Allocator over its pools and claims, and
// returns what to call when done with it. From manifests or a cluster, it
// also returns what was read, with its problems (c is not nil even when err
// is not, if the input was read); from a state directory, its Store, whose
// unreadable claim files the Allocator passes over.
func (s *source) open(ctx context.Context, in *input, now time.Time) (a *ipam.Allocator, c *cluster, st store.Store, done func(), err error) {
	if s.cniConf != "" {
		a, st, done, err = stateAllocator(s.cniConf, s.stateDir, in.progress)
		return a, nil, st, done, err
	}
	if c, err = in.cluster(ctx); err != nil {
		return nil, nil, nil, nil, err
	}
	c.dropOverlaps()
	e, err := newExplainer(ctx, c, ipam.NetConf{}, now)
	if err != nil {
		return nil, c, nil, nil, err
	}
	return e.alloc, c, nil, func() {}, nil
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
