package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// defaultTimeout bounds one invocation, as Spiderpool's plugin does (host-local
// has no bound). A call that cannot finish in time fails with code 11.
const defaultTimeout = 100 * time.Second

// opener opens the claims of a network: the state directory dir, its files
// mapped to pools by pools. The returned closer releases what it holds.
type opener func(dir string, pools []poolLoc, sync bool) (store.Store, io.Closer, error)

// plugin serves the CNI commands. The zero plugin is not usable; main builds
// one over the file store, tests over what they like.
type plugin struct {
	open    opener
	stdout  io.Writer
	warn    io.Writer // notes for the runtime's log: stderr
	timeout time.Duration
	// kube, if set, gives the calls with an ipam.kubernetes section the
	// long-lived store, allocator and cluster of the node agent (agent.go),
	// which serves them; nil, each call opens its own (openKubernetes).
	kube kubeSessions
}

// kubeSessions are what the node agent keeps for the calls it serves.
type kubeSessions interface {
	// session returns the store, allocator and cluster for the
	// ipam.kubernetes section raw, or an error to answer the call with
	// (code 11 while the agent's caches are not synced).
	session(ctx context.Context, raw json.RawMessage) (store.Store, *ipam.Allocator, cluster, error)
	// status answers STATUS: whether the agent is ready and the API server
	// answers within limit.
	status(raw json.RawMessage, limit time.Duration) error
}

// funcs returns the CNI commands; each forwards the call to the node agent
// when the network config names one (ipam.kubernetes.agent, agentclient.go)
// and this process is not the agent itself.
func (p *plugin) funcs() skel.CNIFuncs {
	return skel.CNIFuncs{
		Add:    p.via("ADD", p.cmdAdd),
		Del:    p.via("DEL", p.cmdDel),
		Check:  p.via("CHECK", p.cmdCheck),
		GC:     p.via("GC", p.cmdGC),
		Status: p.via("STATUS", p.cmdStatus),
	}
}

// session is one invocation's configuration, store and allocator.
type session struct {
	cfg   *config
	store store.Store
	alloc *ipam.Allocator
	// cluster is the cluster of the ipam.kubernetes section, nil without
	// one.
	cluster cluster
}

// cluster is a Kubernetes cluster that holds a network's pools and claims
// (the ipam.kubernetes section, kube.go).
type cluster interface {
	// request returns the request of the pod that CNI_ARGS names, read
	// from the cluster, for interface ifname of container containerID.
	request(ctx context.Context, pod podArgs, containerID, ifname string, nc ipam.NetConf) (ipam.Request, error)
}

// run loads the configuration, opens the store and calls do, all within the
// invocation's deadline, and returns do's error as a CNI error.
func (p *plugin) run(args *skel.CmdArgs, do func(ctx context.Context, s *session) error) error {
	return p.runChecked(args, nil, do)
}

// runChecked is run with a check of the configuration before the store is
// opened: an error of check is the call's, and done ends the call there,
// successfully, without opening the store.
func (p *plugin) runChecked(args *skel.CmdArgs, check func(cfg *config) (done bool, err error), do func(ctx context.Context, s *session) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	cfg, locs, cat, err := p.prepare(args)
	if err != nil {
		return toCNI(cfg, err)
	}
	if check != nil {
		if done, err := check(cfg); err != nil || done {
			if err != nil {
				return toCNI(cfg, err)
			}
			return nil
		}
	}
	var st store.Store
	var closer io.Closer
	var pools ipam.PoolSource = cat
	var cl cluster
	var alloc *ipam.Allocator // the agent's, else one for this call
	tooLate := func(err error) error { return err }
	switch {
	case cfg.Kubernetes != nil:
		// The section's timeout bounds what the call asks of the API
		// server, shorter than the call's own deadline.
		var limit time.Duration
		if limit, err = kubernetesTimeout(cfg.Kubernetes); err != nil {
			return toCNI(cfg, err)
		}
		limit = min(limit, p.timeout)
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, limit)
		defer stop()
		tooLate = func(err error) error {
			if ctx.Err() == nil {
				return err
			}
			return types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("try again later: ipam.kubernetes: the API server did not answer within %s: %v", limit, err), "")
		}
		if p.kube != nil {
			st, alloc, cl, err = p.kube.session(ctx, cfg.Kubernetes)
		} else {
			st, pools, cl, err = openKubernetes(ctx, cfg.Kubernetes, p.warn)
		}
		closer = io.NopCloser(nil)
	case cfg.Etcd != nil:
		st, closer, err = openEtcd(cfg.Etcd, cfg.Name)
	default:
		if st, closer, err = p.openCtx(ctx, cfg.Dir(), locs, cfg.Sync); err != nil {
			err = fmt.Errorf("opening state directory %s: %w", cfg.Dir(), err)
			if ctx.Err() == nil {
				err = &codedError{types.ErrIOFailure, err}
			}
		}
	}
	if err != nil {
		return toCNI(cfg, tooLate(err))
	}
	defer func() {
		if ctx.Err() != nil {
			// A write may still be waiting for the directory's lock, which
			// Close would wait for: let it go (the process exits anyway).
			go closer.Close()
			return
		}
		closer.Close()
	}()
	if alloc == nil {
		if alloc, err = ipam.NewAllocator(ipam.Options{Pools: pools, Store: st}); err != nil {
			return toCNI(cfg, err)
		}
	}
	if err := do(ctx, &session{cfg: cfg, store: st, alloc: alloc, cluster: cl}); err != nil {
		return toCNI(cfg, tooLate(err))
	}
	return nil
}

// prepare loads the configuration and checks it: where each pool's claims
// live, and the pools as a catalog. A prevResult that could not be read is
// noted on the warning output. cfg is nil if the configuration did not load.
func (p *plugin) prepare(args *skel.CmdArgs) (cfg *config, locs []poolLoc, cat *ipam.Catalog, err error) {
	if err := checkContainerID(args.ContainerID); err != nil {
		return nil, nil, nil, err
	}
	if cfg, err = loadConfig(args.StdinData, args.Args); err != nil {
		return nil, nil, nil, err
	}
	if cfg.PrevResultErr != nil {
		fmt.Fprintf(p.warn, "cni-ipam: %s: ignored: %v\n", args.ContainerID, cfg.PrevResultErr)
	}
	if locs, err = cfg.Locations(); err != nil {
		return cfg, nil, nil, &codedError{types.ErrInvalidNetworkConfig, err}
	}
	if cat, err = ipam.NewCatalog(cfg.Pools...); err != nil {
		return cfg, nil, nil, &codedError{types.ErrInvalidNetworkConfig, err}
	}
	return cfg, locs, cat, nil
}

// openCtx opens the store within ctx: opening takes the directory's lock,
// which another process may hold for longer than the deadline. If ctx ends
// first, the store is closed once the open returns.
func (p *plugin) openCtx(ctx context.Context, dir string, locs []poolLoc, sync bool) (store.Store, io.Closer, error) {
	type opened struct {
		st     store.Store
		closer io.Closer
		err    error
	}
	ch := make(chan opened, 1)
	open := p.open
	go func() {
		st, c, err := open(dir, locs, sync)
		ch <- opened{st, c, err}
	}()
	select {
	case o := <-ch:
		return o.st, o.closer, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.err == nil {
				o.closer.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
}

func (p *plugin) cmdAdd(args *skel.CmdArgs) error {
	return p.runChecked(args, checkPod, func(ctx context.Context, s *session) error {
		c := s.cfg
		req := ipam.Request{ContainerID: args.ContainerID}
		ifc := ipam.NIC{Name: args.IfName}
		switch {
		case s.cluster != nil:
			// The pod as the cluster has it: its UID is the owner, its
			// labels, annotations, namespace and node feed the selection.
			var err error
			if req, err = s.cluster.request(ctx, c.Pod, args.ContainerID, args.IfName, c.NetConf); err != nil {
				return err
			}
			ifc = req.Interfaces[0]
		case c.Selects:
			// The Spiderpool form: the pools come from the selection
			// pipeline. The owner stays the container ID (the state
			// directory records no pod UID); the pod's namespace and name
			// feed the filters.
			req.Namespace, req.Name, req.NetConf = c.Pod.Namespace, c.Pod.Name, c.NetConf
			req.Node, _ = os.Hostname()
		default:
			ifc.Pools, ifc.IPs = c.PoolNames(), c.Requested
		}
		req.Interfaces = []ipam.NIC{ifc}
		res, err := s.alloc.Allocate(ctx, req)
		if err != nil {
			return err
		}
		// A pod's ipam.spidernet.io/ippools annotation may have the
		// library serve its other interfaces too; this call answers for
		// its own.
		res.IPs = slices.DeleteFunc(res.IPs, func(x ipam.IPConfig) bool { return x.Interface != args.IfName })
		out, err := result(c, res)
		if err != nil {
			return err
		}
		v, err := out.GetAsVersion(cniVersion(c))
		if err != nil {
			return err
		}
		return v.PrintTo(p.stdout)
	})
}

// checkShared reports what is wrong with the etcd or kubernetes section of
// cfg, without connecting to anything.
func checkShared(cfg *config) error {
	if cfg.Kubernetes != nil {
		_, err := kubernetesTimeout(cfg.Kubernetes)
		return err
	}
	if cfg.Etcd != nil {
		return checkEtcd(cfg.Etcd, cfg.Name)
	}
	return nil
}

// checkPod refuses an ADD with an ipam.kubernetes section whose CNI_ARGS
// do not name the pod, before the cluster is asked anything: a
// configuration error, not one to try again.
func checkPod(cfg *config) (bool, error) {
	if cfg.Kubernetes == nil {
		return false, nil
	}
	if err := checkShared(cfg); err != nil {
		return false, err // the section first
	}
	if cfg.Pod.Namespace == "" || cfg.Pod.Name == "" {
		return false, &codedError{types.ErrInvalidEnvironmentVariables,
			fmt.Errorf("CNI_ARGS: K8S_POD_NAMESPACE and K8S_POD_NAME are needed with ipam.kubernetes (namespace %q, name %q)", cfg.Pod.Namespace, cfg.Pod.Name)}
	}
	return false, nil
}

// cniVersion returns the version the result is written in: the config's, as
// skel reads it (missing means 0.1.0).
func cniVersion(c *config) string {
	if c.CNIVersion == "" {
		return "0.1.0"
	}
	return c.CNIVersion
}

// result converts what the allocator handed out into a CNI result: addresses
// in pool order, ipam.routes followed by the pools' routes, and the DNS of
// resolvConf.
func result(c *config, res ipam.Result) (*types100.Result, error) {
	out := &types100.Result{CNIVersion: types100.ImplementedSpecVersion}
	routes := slices.Clone(c.Routes)
	for _, ipc := range res.IPs {
		x := &types100.IPConfig{Address: ipNet(ipc.Address)}
		if ipc.Gateway.IsValid() {
			x.Gateway = net.IP(ipc.Gateway.AsSlice())
		}
		out.IPs = append(out.IPs, x)
		for _, r := range ipc.Routes {
			if !slices.Contains(routes, r) {
				routes = append(routes, r)
			}
		}
	}
	for _, r := range routes {
		rt := &types.Route{Dst: ipNet(r.Dst.Masked())}
		if r.GW.IsValid() {
			rt.GW = net.IP(r.GW.AsSlice())
		}
		out.Routes = append(out.Routes, rt)
	}
	if c.ResolvConf != "" {
		dns, err := readResolvConf(c.ResolvConf)
		if err != nil {
			return nil, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.resolvConf: %w", err)}
		}
		out.DNS = *dns
	}
	return out, nil
}

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (p *plugin) cmdDel(args *skel.CmdArgs) error {
	return p.run(args, func(ctx context.Context, s *session) error {
		owner := store.Owner{ContainerID: args.ContainerID, Interface: args.IfName}
		if s.cluster != nil {
			return releaseUnstable(ctx, s, owner, s.cfg.Pod.UID)
		}
		if s.cfg.PrevResult != nil {
			done, err := releaseListed(ctx, s, owner)
			if err != nil || done {
				return err
			}
		}
		return s.alloc.Release(ctx, owner)
	})
}

// releaseUnstable releases what owner (a container ID and interface) holds
// in a cluster, but for the claims of a StatefulSet's pod, which its next
// incarnation takes over: the garbage collector (k8s/kubegc) releases those
// once the pod is no longer a valid member. Each claim is released at the
// revision it was read at.
//
// With the pod's UID (CNI_ARGS K8S_POD_UID, which containerd and CRI-O
// send), the claims are found by it, and only those of owner's container
// are released (a sandbox recreated for the same pod keeps its claims): on
// the Kubernetes store a UID's claims are read by name, at a cost that does
// not grow with the cluster's claims, where a container ID's are a
// label-selector list of every claim.
func releaseUnstable(ctx context.Context, s *session, owner store.Owner, uid string) error {
	find := owner
	if uid != "" {
		find = store.Owner{UID: uid, Interface: owner.Interface}
	}
	held, err := s.alloc.Lookup(ctx, find)
	if err != nil {
		return err
	}
	for _, c := range held {
		if c.Owner.Stable || c.Owner.ContainerID != owner.ContainerID {
			continue
		}
		if err := s.alloc.ReleaseClaim(ctx, c); err != nil && !errors.Is(err, ipam.ErrNotFound) && !errors.Is(err, ipam.ErrConflict) {
			return err
		}
	}
	return nil
}

// releaseListed releases the addresses of prevResult that owner holds, each
// by one Get and one Delete: its cost does not grow with the number of
// claims. It reports whether that was everything: every address of
// prevResult in this network's pools was owner's and is released. Otherwise
// the caller releases by owner, which finds what prevResult did not list.
func releaseListed(ctx context.Context, s *session, owner store.Owner) (bool, error) {
	complete, released := true, 0
	for _, ip := range s.cfg.PrevResult.IPs {
		pool := s.cfg.poolAt(ip)
		if pool == nil {
			continue // another plugin's address
		}
		c, err := s.store.Get(ctx, pool.Name, ip)
		switch {
		case errors.Is(err, store.ErrNotFound):
			complete = false
			continue
		case err != nil:
			return false, err
		case !holds(c.Owner, owner):
			complete = false
			continue
		}
		switch err := s.store.Delete(ctx, pool.Name, ip, c.Revision); {
		case err == nil || errors.Is(err, store.ErrNotFound):
			released++
		case errors.Is(err, store.ErrConflict):
			complete = false
		default:
			return false, err
		}
	}
	return complete && released > 0, nil
}

// holds reports whether a claim's owner is owner: the same container ID and
// interface, or a legacy claim of that container ID that recorded no
// interface.
func holds(claim, owner store.Owner) bool {
	return claim.ContainerID == owner.ContainerID && (claim.Interface == owner.Interface || claim.Interface == "")
}

func (p *plugin) cmdCheck(args *skel.CmdArgs) error {
	return p.run(args, func(ctx context.Context, s *session) error {
		owner := store.Owner{ContainerID: args.ContainerID, Interface: args.IfName}
		ours := 0
		if pr := s.cfg.PrevResult; pr != nil {
			for _, ip := range pr.IPs {
				pool := s.cfg.poolAt(ip)
				if pool == nil {
					continue // another plugin's address
				}
				ours++
				c, err := s.store.Get(ctx, pool.Name, ip)
				switch {
				case errors.Is(err, store.ErrNotFound):
					return fmt.Errorf("%s: address %s of prevResult is not allocated", owner, ip)
				case err != nil:
					return err
				case !holds(c.Owner, owner):
					return fmt.Errorf("%s: address %s of prevResult is held by %s", owner, ip, c.Owner)
				}
			}
		}
		if ours > 0 {
			return nil
		}
		held, err := s.alloc.Lookup(ctx, owner)
		if err != nil {
			return err
		}
		if len(held) == 0 {
			return fmt.Errorf("failed to find address added by container %s (interface %s)", owner.ContainerID, owner.Interface)
		}
		return nil
	})
}

// cmdGC releases every claim of the network's pools whose attachment
// (container ID, interface) is not in cni.dev/valid-attachments. A legacy
// claim, which recorded no interface, stays while any valid attachment has its
// container ID. An empty list releases everything; a missing one nothing.
//
// With a shared store (ipam.etcd, ipam.kubernetes) it releases nothing: the
// list names this node's attachments, the claims are every node's, and a
// claim records no node that would tell this node's apart. It says so on
// stderr, which the runtime logs, and succeeds, so that a runtime's periodic
// GC does not fail on every node.
func (p *plugin) cmdGC(args *skel.CmdArgs) error {
	shared := func(cfg *config) (bool, error) {
		if cfg.ValidAttachments == nil {
			return true, nil
		}
		if sh := cfg.sharedStore(); sh != "" {
			if err := checkShared(cfg); err != nil {
				return false, err // a bad section is still an error
			}
			fmt.Fprintf(p.warn, "cni-ipam: GC of network %q: nothing released: the claims in %s are every node's, and cni.dev/valid-attachments names this node's only; DEL releases a container's claims, and a cluster-wide collector those of containers gone without one\n",
				cfg.Name, sh)
			return true, nil
		}
		return false, nil
	}
	return p.runChecked(args, shared, func(ctx context.Context, s *session) error {
		valid := make(map[types.GCAttachment]bool, len(s.cfg.ValidAttachments))
		ids := make(map[string]bool, len(s.cfg.ValidAttachments))
		for _, a := range s.cfg.ValidAttachments {
			valid[a] = true
			ids[a.ContainerID] = true
		}
		claims, err := s.alloc.Claims(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for _, c := range claims {
			o := c.Owner
			if valid[types.GCAttachment{ContainerID: o.ContainerID, IfName: o.Interface}] || (o.Interface == "" && ids[o.ContainerID]) {
				continue
			}
			err := s.alloc.ReleaseClaim(ctx, c)
			if err != nil && !errors.Is(err, ipam.ErrNotFound) && !errors.Is(err, ipam.ErrConflict) {
				// Gone already, or claimed again since it was listed: both
				// are someone else's business now.
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// cmdStatus reports ready when the configuration loads (with its resolvConf
// file) and the state directory is usable: it exists and this process may
// read and write it, or it can be created. It creates nothing: a readiness
// probe leaves no directory or lock file behind.
func (p *plugin) cmdStatus(args *skel.CmdArgs) error {
	cfg, _, _, err := p.prepare(args)
	if err != nil {
		return toCNI(cfg, err)
	}
	if cfg.ResolvConf != "" {
		if _, err := readResolvConf(cfg.ResolvConf); err != nil {
			return toCNI(cfg, &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("ipam.resolvConf: %w", err)})
		}
	}
	if cfg.Etcd != nil {
		return etcdStatus(cfg.Etcd, cfg.Name, cfg.Pools, p.timeout)
	}
	if cfg.Kubernetes != nil {
		if p.kube != nil {
			return p.kube.status(cfg.Kubernetes, p.timeout)
		}
		return kubernetesStatus(cfg.Kubernetes, p.timeout)
	}
	if err := usableDir(cfg.Dir()); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("state directory %s: %v", cfg.Dir(), err), "")
	}
	return nil
}

// toCNI returns err as a CNI error:
//   - a configuration problem: 6 (cannot decode), 7 (invalid network config),
//     or 4 (CNI_ARGS, an environment variable); a state directory that cannot
//     be opened: 5 (I/O failure);
//   - a lost race in the store (ErrConflict) or the invocation's deadline: 11,
//     try again later;
//   - anything else: 999 with the library's message. Exhaustion in a
//     host-local range set reads as host-local's message does.
//
// In host-local's form, messages name range sets by index, never the pools
// the plugin made of them.
func toCNI(c *config, err error) *types.Error {
	e := cniError(c, err)
	e.Msg, e.Details = c.userText(e.Msg), c.userText(e.Details)
	return e
}

// cniError is toCNI without the rewriting of pool names.
func cniError(c *config, err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return types.NewError(ce.code, ce.Error(), "")
	}
	details := ""
	if c != nil && c.Selects {
		// The trace says, pool by pool, why selection found nothing.
		details = traceOf(err)
	}
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		etcdUnavailable(err), kubernetesUnavailable(err):
		return types.NewError(types.ErrTryAgainLater, "try again later: "+err.Error(), details)
	case errors.Is(err, ipam.ErrInvalid), errors.Is(err, ipam.ErrNotFound):
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), details)
	}
	var ae *ipam.AllocationError
	if c != nil && !c.Selects && errors.As(err, &ae) && ae.Error() == err.Error() && ae.Pool != "" {
		if i := c.poolIndex(ae.Pool); i >= 0 {
			msg := ae.Reason
			if errors.Is(err, ipam.ErrExhausted) {
				rs, _ := c.Pools[i].RangeSet()
				names := make([]string, len(rs))
				for k, r := range rs {
					names[k] = r.String()
				}
				msg = "no IP addresses available in range set: " + strings.Join(names, ",")
			}
			return types.NewError(types.ErrInternal, fmt.Sprintf("failed to allocate for range %d: %s", i, msg), strings.TrimSpace(err.Error()+"\n"+details))
		}
	}
	return types.NewError(types.ErrInternal, err.Error(), details)
}

// traceOf returns the allocation trace inside err, one entry a line.
func traceOf(err error) string {
	var ae *ipam.AllocationError
	if !errors.As(err, &ae) || len(ae.Trace) == 0 {
		return ""
	}
	lines := make([]string, len(ae.Trace))
	for i, e := range ae.Trace {
		lines[i] = e.String()
	}
	return strings.Join(lines, "\n")
}
