package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// runWho prints who holds an address: every claim of it, in any pool, from
// the same sources as pools (manifests, a live cluster, a node's state
// directory). An address no one holds is not an error: the answer says so.
func runWho(ctx context.Context, args []string, in *input, stdout, stderr io.Writer, clock func() time.Time) int {
	out := output("table")
	fs := newFlagSet("who", stderr, in)
	fs.Var(&out, "o", "output `format`: table or json")
	var src source
	src.flags(fs, in)
	// The address may come first, before the flags, which flag would not
	// parse past.
	var addr string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		addr, args = args[0], append([]string{}, args[1:]...)
		args = append(args, "--", addr)
	}
	if code, ok := src.parse(fs, args, in, true); !ok {
		return code
	}
	ip, err := netip.ParseAddr(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl who: address %q: not an IP address\n", fs.Arg(0))
		return exitUsage
	}
	ctx, cancel := in.bound(ctx)
	defer cancel()
	now := clock()
	a, c, st, done, err := src.open(ctx, in, now)
	var (
		held       []store.Claim
		unreadable []error
	)
	if err == nil {
		defer done()
		var all []store.Claim
		all, err = a.Claims(ctx)
		for _, cl := range all {
			if cl.IP == ip {
				held = append(held, cl)
			}
		}
		if st != nil && err == nil {
			// A claim file the Allocator could not read still holds
			// its address: ask the Store of each pool for it.
			var us []ipam.Usage
			us, err = a.Usage(ctx, now)
			for _, u := range us {
				if _, gerr := st.Get(ctx, u.Pool, ip); errors.Is(gerr, store.ErrCorrupt) {
					unreadable = append(unreadable, gerr)
				}
			}
		}
	}
	if err != nil {
		if c != nil {
			printProblems(stderr, c)
		}
		fmt.Fprintf(stderr, "ipamctl who: %v\n", err)
		return exitProblem
	}
	slices.SortFunc(held, func(x, y store.Claim) int { return strings.Compare(x.Pool, y.Pool) })
	if out == "json" {
		err = writeWhoJSON(stdout, ip, held)
	} else {
		err = writeWhoTable(stdout, ip, held, len(unreadable) > 0)
	}
	for _, e := range unreadable {
		fmt.Fprintf(stderr, "ipamctl who: %s is held by a claim that cannot be read: %v\n", ip, e)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl who: writing the output: %v\n", err)
		return exitProblem
	}
	if c != nil {
		return printProblems(stderr, c)
	}
	if len(unreadable) > 0 {
		return exitProblem
	}
	return exitOK
}

func writeWhoTable(w io.Writer, ip netip.Addr, held []store.Claim, unreadable bool) error {
	if len(held) == 0 && unreadable {
		_, err := fmt.Fprintf(w, "%s: held, by a claim that cannot be read\n", ip)
		return err
	}
	if len(held) == 0 {
		_, err := fmt.Fprintf(w, "%s: not held\n", ip)
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "POOL\tIP\tPOD\tUID\tCONTAINER\tINTERFACE")
	for _, cl := range held {
		o := cl.Owner
		pod := "-"
		if o.Name != "" {
			pod = o.Namespace + "/" + o.Name
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", cl.Pool, cl.IP, pod, orDash(o.UID), orDash(o.ContainerID), orDash(o.Interface))
	}
	return t.Flush()
}

func orDash(s string) string { return orDefault(s, "-") }

// whoJSON is -o json: the address and its claims, each with its pool and
// owner as the Store has them.
type whoJSON struct {
	IP     string        `json:"ip"`
	Claims []store.Claim `json:"claims"`
}

func writeWhoJSON(w io.Writer, ip netip.Addr, held []store.Claim) error {
	for i := range held {
		held[i].Revision = 0 // an in-memory copy's, meaningless here
		held[i].Time = time.Time{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(whoJSON{IP: ip.String(), Claims: append([]store.Claim{}, held...)})
}
