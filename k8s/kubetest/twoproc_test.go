package kubetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// twoProcDuration is how long TestTwoProcesses runs its allocators: long
// enough for its pool edits and its API server restart; raise it for a
// soak.
var twoProcDuration = flag.Duration("twoproc.duration", 9*time.Second, "how long TestTwoProcesses allocates")

// The child process: the test binary run again with childEnv set, which
// TestMain sends here instead of starting a server.
const (
	childEnv        = "KUBETEST_CHILD"
	childKubeconfig = "KUBETEST_KUBECONFIG"
	childNode       = "KUBETEST_NODE"
	// childTimeout bounds each of the child's calls.
	childTimeout = 2 * time.Second
)

// childOp is one call of a child, as it reports it on stdout.
type childOp struct {
	Op          string `json:"op"` // "allocate" or "release"
	UID         string `json:"uid"`
	IP          string `json:"ip,omitempty"`
	Pool        string `json:"pool,omitempty"`
	Err         string `json:"err,omitempty"`
	Unavailable bool   `json:"unavailable,omitempty"` // the error wraps kubestore.ErrUnavailable
	NoPool      bool   `json:"noPool,omitempty"`      // the error wraps ipam.ErrNoCandidates: no pool could serve
	Start       int64  `json:"start"`                 // Unix nanoseconds
	End         int64  `json:"end"`
}

// childMain allocates for pods on its node until stdin is closed: it
// allocates a new pod, then releases three pods of every four, retrying
// a release until it is acknowledged; each call bounded by childTimeout.
// It writes each call on stdout.
func childMain() int {
	node := os.Getenv(childNode)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", node, err)
		return 2
	}
	cfg, err := kubeclient.Config(os.Getenv(childKubeconfig))
	if err != nil {
		return fail(err)
	}
	cfg.QPS = -1
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return fail(err)
	}
	src, err := kubepools.New(cfg, kubepools.Options{})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)
	if err := src.WaitForSync(ctx); err != nil {
		return fail(err)
	}
	// An informer's first list may be served from a watch cache that has
	// not yet seen pools created just before the child started: wait until
	// both are known, so that the churn below tests edits and restarts,
	// not the child's start.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, okA := src.Pool("tp-a")
		_, okB := src.Pool("tp-b")
		if okA && okB {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("pools tp-a and tp-b not seen 30 s after the source synced"))
		}
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st, Spread: node})
	if err != nil {
		return fail(err)
	}
	go a.Follow(ctx)

	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	report := func(op childOp) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(op); err != nil {
			os.Exit(3)
		}
	}
	call := func(op childOp, do func(context.Context) (ipam.Result, error)) (childOp, bool) {
		cctx, ccancel := context.WithTimeout(ctx, childTimeout)
		op.Start = time.Now().UnixNano()
		res, err := do(cctx)
		op.End = time.Now().UnixNano()
		ccancel()
		if err != nil {
			op.Err, op.Unavailable, op.NoPool = err.Error(), errors.Is(err, kubestore.ErrUnavailable), errors.Is(err, ipam.ErrNoCandidates)
		} else if len(res.IPs) > 0 {
			op.IP, op.Pool = res.IPs[0].Address.Addr().String(), res.IPs[0].Pool
		}
		report(op)
		return op, err == nil
	}
	// Every fourth pod stays, to hold addresses through the pool edits and
	// the restart, until its pools are exhausted: an allocation that finds
	// no pool with room lets the oldest of them go. So the pools fill and
	// allocations meet exhausted pools, as they did before that rule, but a
	// long run (-twoproc.duration, a soak) no longer fills them for good
	// and leaves nothing to allocate once the server is back.
	var toRelease, kept []string
	for i := 0; ; i++ {
		select {
		case <-stop:
			// Finish the releases begun, then exit.
			for _, uid := range toRelease {
				for {
					if _, ok := call(childOp{Op: "release", UID: uid}, func(ctx context.Context) (ipam.Result, error) {
						return ipam.Result{}, a.Release(ctx, store.Owner{Namespace: "tp", Name: uid, UID: uid})
					}); ok {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			return 0
		default:
		}
		uid := fmt.Sprintf("%s-%d", node, i)
		op, ok := call(childOp{Op: "allocate", UID: uid}, func(ctx context.Context) (ipam.Result, error) {
			return a.Allocate(ctx, ipam.Request{Namespace: "tp", Name: uid, UID: uid, Node: node,
				Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4": ["tp-a", "tp-b"]}`},
				Interfaces:  []ipam.NIC{{Name: "eth0"}}})
		})
		switch {
		case !ok:
			if op.NoPool && len(kept) > 0 {
				toRelease, kept = append(toRelease, kept[0]), kept[1:]
			}
			time.Sleep(20 * time.Millisecond) // the server may be down
		case i%4 != 0:
			toRelease = append(toRelease, uid)
		default:
			kept = append(kept, uid)
		}
		// Release what is due; a release that fails is tried again next
		// round (it may or may not have happened).
		var left []string
		for _, uid := range toRelease {
			if _, ok := call(childOp{Op: "release", UID: uid}, func(ctx context.Context) (ipam.Result, error) {
				return ipam.Result{}, a.Release(ctx, store.Owner{Namespace: "tp", Name: uid, UID: uid})
			}); !ok {
				left = append(left, uid)
			}
		}
		toRelease = left
		if len(left) > 0 {
			time.Sleep(50 * time.Millisecond) // the server may be down
		}
	}
}

// TestTwoProcesses runs two allocator processes (this test binary again,
// each an Allocator that follows the Store, with the SpiderIPPools of a
// kubepools.Source) on two nodes, allocating from two shared SpiderIPPools
// while the test disables one, changes its node list, shrinks its ips, and
// stops and restarts the API server. At the end: no address was held by two
// pods at once, every allocation acknowledged and not released is in the
// Store, every call ended within its deadline, the calls made while the
// server was down failed with kubestore.ErrUnavailable, and no allocation
// went against an edit made a second before.
func TestTwoProcesses(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	poolA := func(ips string, extra ...any) {
		spec := map[string]any{"ipVersion": int64(4), "subnet": "10.60.0.0/24", "ips": []any{ips}, "nodeName": []any{"tp-node-1", "tp-node-2"}}
		for i := 0; i+1 < len(extra); i += 2 {
			spec[extra[i].(string)] = extra[i+1]
		}
		applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "tp-a", spec)
	}
	poolA("10.60.0.10-10.60.0.250")
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "tp-b", map[string]any{
		"ipVersion": int64(4), "subnet": "10.61.0.0/24", "ips": []any{"10.61.0.10-10.61.0.250"},
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "tp-a", "tp-b") })

	// The children.
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		ops    []childOp
		stderr strings.Builder
		done   chan struct{}
	}
	children := map[string]*child{}
	for _, node := range []string{"tp-node-1", "tp-node-2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=allocator", childKubeconfig+"="+kubeconfig, childNode+"="+node)
		c := &child{cmd: cmd, done: make(chan struct{})}
		cmd.Stderr = &c.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var op childOp
				if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
					t.Errorf("child %s: %q: %v", node, sc.Text(), err)
					continue
				}
				c.ops = append(c.ops, op)
			}
		}()
		children[node] = c
		t.Cleanup(func() { cmd.Process.Kill() })
	}

	// The edits, each with when it was done (after the write returned).
	var edits []poolEdit
	pause := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	edit := func(what string, write func()) {
		begin := time.Now()
		write()
		edits = append(edits, poolEdit{what, begin, time.Now()})
	}
	// In ninths of the run: disabled at 1, node 1 only at 3, shrunk at 4,
	// the server down from 5 to 7, the end at 9.
	step := *twoProcDuration / 9
	pause(step)
	edit("disabled", func() { poolA("10.60.0.10-10.60.0.250", "disable", true) })
	pause(2 * step)
	edit("node-1 only", func() { poolA("10.60.0.10-10.60.0.250", "nodeName", []any{"tp-node-1"}) })
	pause(step)
	edit("shrunk", func() { poolA("10.60.0.10-10.60.0.100", "nodeName", []any{"tp-node-1"}) })
	pause(step)
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	downUntil := time.Now() // the server answers nothing from here...
	pause(2 * step)
	upFrom := time.Now() // ...to here
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	pause(2 * step)
	for _, c := range children {
		c.stdin.Close()
	}
	for node, c := range children {
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			t.Fatalf("child %s did not finish", node)
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %s: %v\n%s", node, err, c.stderr.String())
		}
	}

	var all []childOp
	counts := map[string]map[string]int{}
	for node, c := range children {
		counts[node] = map[string]int{}
		for _, op := range c.ops {
			all = append(all, op)
			k := op.Op
			switch {
			case op.Err == "":
			case op.Unavailable:
				k += " unavailable"
			default:
				k += " failed"
			}
			counts[node][k]++
		}
	}
	t.Logf("calls: %v; server down for %s", counts, upFrom.Sub(downUntil).Round(time.Millisecond))
	var slowest time.Duration
	for _, op := range all {
		if op.Unavailable {
			slowest = max(slowest, time.Duration(op.End-op.Start))
		}
	}
	t.Logf("the slowest call failing with ErrUnavailable took %s", slowest.Round(time.Millisecond))
	seen := map[string]bool{} // the other errors, once each
	for _, op := range all {
		if msg := strings.ReplaceAll(op.Err, op.UID, "<pod>"); msg != "" && !op.Unavailable && !seen[msg] {
			seen[msg] = true
			t.Logf("%s: %s", op.Op, msg)
		}
	}
	// A pod holds its address from the end of its allocation to the start
	// of its first release (which may have happened even if it failed): no
	// two pods may hold one address at once. The Store lets a create of an
	// address succeed only after the delete of its last claim, which began
	// after that claim's release began.
	type holding struct {
		uid        string
		from, till int64 // till 0: not released
	}
	byIP := map[string][]*holding{}
	byUID := map[string]*holding{}
	held := map[string]string{}  // pod → address, for the pods that hold one at the end
	pending := map[string]bool{} // pods whose allocation failed: may hold an address
	var errs []string
	for _, op := range all {
		start, end := time.Unix(0, op.Start), time.Unix(0, op.End)
		// Ten seconds to spare for a loaded machine: a call that ignored
		// its deadline would wait for ever.
		if took := end.Sub(start); took > childTimeout+10*time.Second {
			errs = append(errs, fmt.Sprintf("%s %s took %s, past its %s deadline", op.Op, op.UID, took, childTimeout))
		}
		switch {
		case start.After(downUntil) && end.Before(upFrom) && !op.Unavailable:
			errs = append(errs, fmt.Sprintf("%s %s while the server was down: %q, want kubestore.ErrUnavailable", op.Op, op.UID, op.Err))
		case op.Err != "" && !op.Unavailable && !op.NoPool:
			errs = append(errs, fmt.Sprintf("%s %s: %q, want kubestore.ErrUnavailable or ipam.ErrNoCandidates", op.Op, op.UID, op.Err))
		}
		switch {
		case op.Op == "allocate" && op.Err == "":
			h := &holding{uid: op.UID, from: op.End}
			byIP[op.IP] = append(byIP[op.IP], h)
			byUID[op.UID] = h
			held[op.UID] = op.IP
			errs = append(errs, againstEdits(op, edits)...)
		case op.Op == "allocate":
			pending[op.UID] = true
		case op.Op == "release":
			if h := byUID[op.UID]; h != nil && (h.till == 0 || op.Start < h.till) {
				h.till = op.Start
			}
			if op.Err == "" {
				delete(held, op.UID)
			}
		}
	}
	for ip, hs := range byIP {
		sort.Slice(hs, func(i, j int) bool { return hs[i].from < hs[j].from })
		for i := 1; i < len(hs); i++ {
			if prev := hs[i-1]; prev.till == 0 || hs[i].from < prev.till {
				errs = append(errs, fmt.Sprintf("%s given to %s while %s held it", ip, hs[i].uid, prev.uid))
			}
		}
	}
	for _, e := range errs[:min(len(errs), 20)] {
		t.Error(e)
	}

	// Every allocation acknowledged and not released is in the Store, as
	// the pod's; nothing else is but what failed allocations may have left.
	st := newStore(t)
	var claims []store.Claim
	for _, pool := range []string{"tp-a", "tp-b"} {
		cs, err := st.List(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, cs...)
	}
	inStore := map[string]string{}
	for _, c := range claims {
		inStore[c.Owner.UID] = c.IP.String()
	}
	for uid, ip := range held {
		if inStore[uid] != ip {
			t.Errorf("%s acknowledged %s and did not release it; the Store has %q for it", uid, ip, inStore[uid])
		}
	}
	for uid, ip := range inStore {
		if _, ok := held[uid]; !ok && !pending[uid] {
			t.Errorf("the Store has %s for %s, which holds nothing", ip, uid)
		}
	}
	var refused, after int
	for _, op := range all {
		switch {
		case op.Op == "allocate" && op.Unavailable:
			refused++
		case op.Op == "allocate" && op.Err == "" && op.Start > upFrom.UnixNano():
			after++
		}
	}
	if refused == 0 || after == 0 {
		t.Errorf("calls %v: want allocations refused while the server was down (%d), and made after it was back (%d)", counts, refused, after)
	}
}

// poolEdit is a pool edit of TestTwoProcesses, and when it was written:
// the write began at begin and was acknowledged at end.
type poolEdit struct {
	what       string
	begin, end time.Time
}

// editMargin is how long after an edit allocations must follow it: the
// time an informer takes to hear of it, with room to spare.
const editMargin = time.Second

// againstEdits says how an allocation went against the pool edits in
// force for all of it, made editMargin or more before it started: from tp-a
// while it was disabled, on node 2 once tp-a served node 1 only, outside
// tp-a's shrunk range.
func againstEdits(op childOp, edits []poolEdit) []string {
	if op.Pool != "tp-a" {
		return nil
	}
	start, end := time.Unix(0, op.Start), time.Unix(0, op.End)
	since := func(what string) bool {
		for _, e := range edits {
			if e.what == what {
				return !start.Before(e.end.Add(editMargin))
			}
		}
		return false
	}
	before := func(what string) bool {
		for _, e := range edits {
			if e.what == what {
				return end.Before(e.begin)
			}
		}
		return true
	}
	var out []string
	if since("disabled") && before("node-1 only") {
		out = append(out, fmt.Sprintf("%s got %s from tp-a, disabled", op.UID, op.IP))
	}
	if since("node-1 only") && strings.HasPrefix(op.UID, "tp-node-2-") {
		out = append(out, fmt.Sprintf("%s got %s from tp-a, which no longer serves tp-node-2", op.UID, op.IP))
	}
	if since("shrunk") && !netipxRangeContains("10.60.0.10-10.60.0.100", op.IP) {
		out = append(out, fmt.Sprintf("%s got %s from tp-a, outside its shrunk range", op.UID, op.IP))
	}
	return out
}

func netipxRangeContains(r, ip string) bool {
	from, to, _ := strings.Cut(r, "-")
	a := netip.MustParseAddr(ip)
	return netip.MustParseAddr(from).Compare(a) <= 0 && a.Compare(netip.MustParseAddr(to)) <= 0
}
