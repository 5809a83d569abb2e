package kubegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/internal/eventnote"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/store"
)

// Defaults of Options.
const (
	DefaultPeriod      = 5 * time.Minute
	DefaultMinInterval = time.Second
)

// Options configure a Runner. The zero Options are the usual ones.
type Options struct {
	// GC are the rules' options, as for gc.Decide.
	GC gc.Options
	// Period is the time between full passes. Zero means DefaultPeriod.
	Period time.Duration
	// MinInterval is the least time between two passes: events that come
	// closer together are handled in one pass. Zero means
	// DefaultMinInterval.
	MinInterval time.Duration
	// Logger receives a line per claim released and per error. Nil
	// discards them.
	Logger *slog.Logger
	// Observe, if set, is called after each pass with its result, from the
	// goroutine that runs Run.
	Observe func(Pass)
	// Informers, if set, gives the shared informers (of a factory) the Runner takes
	// its pod, StatefulSet and node informers from, so that a program
	// whose other parts follow the same kinds keeps one cache of each. The
	// caller starts it (after New, so that those informers are started
	// too) and stops it; Run waits for them to sync, and removes its event
	// handlers when it returns. A Runner on its own informers keeps of each
	// pod only what it reads (SlimPod); give the factory
	// informers.WithTransform(SlimPod) for the same saving. Nil: the Runner
	// makes and runs informers of its own.
	Informers kubeclient.Informers
	// Events, if set, records an Event of reason EventReleased on the pod
	// of each claim released (the pod named by the claim; it is usually
	// gone). Nil records none.
	Events kubeclient.EventRecorder
	// Claims, if set, lists the claims of a full pass in pages (the
	// Allocator's *kubestore.Store is a store.ClaimPager), which the pass
	// judges and releases one page at a time, so that it holds one page of
	// claims, not every claim of the cluster; it must list the claims of
	// the Allocator's Store. Nil: a full pass judges Allocator.Claims, every
	// claim at once.
	Claims store.ClaimPager
	// PageSize is the number of claims of a page of Claims; zero means
	// DefaultPageSize.
	PageSize int
}

// EventReleased is the reason of the Event recorded for each claim
// released (Options.Events).
const EventReleased = "IPReleased"

// Validate reports whether the options make sense: no negative durations,
// valid GC options.
func (o Options) Validate() error {
	var errs []error
	if o.Period < 0 {
		errs = append(errs, fmt.Errorf("kubegc: options: Period %v: negative", o.Period))
	}
	if o.PageSize < 0 {
		errs = append(errs, fmt.Errorf("kubegc: options: PageSize %d: negative", o.PageSize))
	}
	if o.MinInterval < 0 {
		errs = append(errs, fmt.Errorf("kubegc: options: MinInterval %v: negative", o.MinInterval))
	}
	if err := o.GC.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kubegc: %w", err))
	}
	return errors.Join(errs...)
}

// Pass is the result of one pass.
//
// The zero Pass is an empty event pass. A Pass is a plain value.
type Pass struct {
	// Full reports whether the pass judged every claim of the Allocator's
	// pools; otherwise it judged the claims of the pod UIDs in UIDs.
	Full bool
	UIDs []string
	// At is the time of the snapshot the claims were judged against, taken
	// before they were listed.
	At time.Time
	// Decisions has one decision per claim judged (but in a full pass over
	// Options.Claims, which keeps only the decisions that release, applied
	// or failed, to stay within a page of memory). A release carries
	// Applied when this pass released the claim, or Err (wrapping
	// ipam.ErrConflict or ipam.ErrNotFound when someone else changed or
	// released it first). A release decided from the informers' caches that
	// the API server's answers did not confirm is a keep, with the reason
	// of the confirming judgement.
	Decisions []gc.Decision
	// Err is what stopped the pass or failed in it, nil if nothing did.
	Err error
	// judged is the number of claims judged.
	judged int
}

// Judged returns the number of claims p judged.
func (p Pass) Judged() int { return p.judged }

// Released returns the decisions of p that released their claim.
func (p Pass) Released() []gc.Decision {
	var out []gc.Decision
	for _, d := range p.Decisions {
		if d.Applied {
			out = append(out, d)
		}
	}
	return out
}

// Runner is a garbage collector of pod claims for a live cluster; see the
// package documentation.
//
// The zero Runner is not usable; create one with New. A *Runner is safe for
// concurrent use; Run runs once.
type Runner struct {
	alloc *ipam.Allocator
	opts  Options
	log   *slog.Logger
	// informers follow the cluster; fromCache reads their caches (they
	// are one and the same but for tests), fromServer the API server.
	informers             *cacheView
	fromCache, fromServer view

	mu        sync.Mutex
	now       map[string]struct{}  // pod UIDs whose claims to judge at the next pass
	deadlines map[string]time.Time // pod UIDs whose claims to judge at a time
	full      bool                 // a full pass is wanted
	wake      chan struct{}
	running   bool
}

// New returns a Runner that collects the claims of alloc, following the
// cluster cfg names. It does not contact the server until Run. The client's
// rate limits are cfg's (see kubestore.New).
func New(cfg *rest.Config, alloc *ipam.Allocator, opts Options) (*Runner, error) {
	if alloc == nil {
		return nil, errors.New("kubegc: nil *ipam.Allocator")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Period == 0 {
		opts.Period = DefaultPeriod
	}
	if opts.MinInterval == 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.PageSize == 0 {
		opts.PageSize = DefaultPageSize
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client, err := kubeclient.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubegc: %w", err)
	}
	r := &Runner{
		alloc:      alloc,
		opts:       opts,
		log:        log,
		fromServer: &liveView{client},
		now:        map[string]struct{}{},
		deadlines:  map[string]time.Time{},
		wake:       make(chan struct{}, 1),
	}
	if r.informers, err = newCacheView(client, opts.Informers, r); err != nil {
		return nil, fmt.Errorf("kubegc: %w", err)
	}
	r.fromCache = r.informers
	return r, nil
}

// Run follows the cluster and collects garbage until ctx is done, then
// returns ctx's error: a full pass once the informers have synced, then
// passes on events, deadlines and every Options.Period. Errors of a pass
// are logged and reported to Options.Observe; the next pass tries again.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("kubegc: Run called twice")
	}
	r.running = true
	r.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop, err := r.informers.run(ctx, &wg)
	if err != nil {
		return fmt.Errorf("kubegc: %w", err)
	}
	defer stop()
	if err := r.informers.waitForSync(ctx); err != nil {
		return ctx.Err()
	}
	nextFull := time.Now()
	for {
		now := time.Now()
		full, uids, next := r.due(now, nextFull)
		var p Pass
		switch {
		case full:
			nextFull = now.Add(r.opts.Period)
			p = r.CollectAll(ctx)
		case len(uids) > 0:
			p = r.CollectOwners(ctx, uids)
		}
		if p.Full || len(p.UIDs) > 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p.Err != nil {
				r.log.Warn("kubegc: pass failed in part; the next tries again", "full", p.Full, "err", p.Err)
			}
			if r.opts.Observe != nil {
				r.opts.Observe(p)
			}
			// Let events gather before the next pass.
			if !sleep(ctx, r.opts.MinInterval) {
				return ctx.Err()
			}
			continue
		}
		wait := time.Until(nextFull)
		if !next.IsZero() {
			wait = min(wait, time.Until(next))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// due takes what is due at now: whether a full pass is, and the UIDs to
// judge; and returns when the next deadline is (zero if none).
func (r *Runner) due(now, nextFull time.Time) (full bool, uids []string, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	full = r.full || !now.Before(nextFull)
	r.full = false
	for uid, t := range r.deadlines {
		if !now.Before(t) {
			r.now[uid] = struct{}{}
			delete(r.deadlines, uid)
		} else if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if full {
		clear(r.now) // a full pass judges every claim
		return true, nil, next
	}
	for uid := range r.now {
		uids = append(uids, uid)
	}
	clear(r.now)
	return false, uids, next
}

// judgeNow asks for the claims of pod uid to be judged at the next pass.
func (r *Runner) judgeNow(uid string) {
	if uid == "" {
		return
	}
	r.mu.Lock()
	r.now[uid] = struct{}{}
	r.mu.Unlock()
	r.poke()
}

// judgeAt asks for the claims of pod uid to be judged at t (the earliest of
// the times asked for).
func (r *Runner) judgeAt(uid string, t time.Time) {
	if uid == "" {
		return
	}
	r.mu.Lock()
	if old, ok := r.deadlines[uid]; !ok || t.Before(old) {
		r.deadlines[uid] = t
	}
	r.mu.Unlock()
	r.poke()
}

// judgeAll asks for a full pass.
func (r *Runner) judgeAll() {
	r.mu.Lock()
	r.full = true
	r.mu.Unlock()
	r.poke()
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// CollectAll makes a full pass now: it judges every claim of the
// Allocator's pools. Run must be running (the pass reads its informers'
// caches) and synced; Run makes full passes itself, so call this only to
// force one.
func (r *Runner) CollectAll(ctx context.Context) Pass {
	p := Pass{Full: true, At: time.Now()}
	if r.opts.Claims != nil {
		return r.collectPages(ctx, p)
	}
	claims, err := r.alloc.Claims(ctx)
	if err != nil {
		p.Err = fmt.Errorf("kubegc: listing claims: %w", err)
		return p
	}
	return r.collect(ctx, p, claims)
}

// collectPages is a full pass over the pages of Options.Claims: each page
// is judged, confirmed and released as a pass of its own would be, against
// the snapshot time p.At, taken before the listing began; only the
// decisions that release are kept.
func (r *Runner) collectPages(ctx context.Context, p Pass) Pass {
	var errs []error
	err := r.opts.Claims.ClaimPages(ctx, r.opts.PageSize, func(page []store.Claim) error {
		q := r.collect(ctx, Pass{Full: true, At: p.At}, page)
		p.judged += q.judged
		for _, d := range q.Decisions {
			if d.Release {
				p.Decisions = append(p.Decisions, d)
			}
		}
		if q.Err != nil {
			errs = append(errs, q.Err)
		}
		return ctx.Err()
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("kubegc: listing claims: %w", err))
	}
	p.Err = errors.Join(errs...)
	return p
}

// CollectOwners makes an event pass now over the claims of the pods with
// the given UIDs, in every pool. Run must be running, as for CollectAll.
func (r *Runner) CollectOwners(ctx context.Context, uids []string) Pass {
	p := Pass{UIDs: uids, At: time.Now()}
	var claims []store.Claim
	var errs []error
	for _, uid := range uids {
		held, err := r.alloc.Lookup(ctx, store.Owner{UID: uid})
		if err != nil {
			errs = append(errs, fmt.Errorf("kubegc: claims of pod uid %s: %w", uid, err))
			r.judgeNow(uid) // try again at the next pass
			continue
		}
		claims = append(claims, held...)
	}
	p = r.collect(ctx, p, claims)
	p.Err = errors.Join(append(errs, p.Err)...)
	return p
}

// collect judges claims, listed after p.At, against the caches, confirms
// each release against the API server, and applies the confirmed ones.
func (r *Runner) collect(ctx context.Context, p Pass, claims []store.Claim) Pass {
	snap, err := snapshot(ctx, r.fromCache, claims, p.At)
	if err != nil {
		p.Err = err
		return p
	}
	p.Decisions = gc.Decide(claims, snap, time.Now(), r.opts.GC)
	p.judged += len(claims)
	var candidates []store.Claim
	var at []int
	for i, d := range p.Decisions {
		if d.Release {
			candidates = append(candidates, d.Claim)
			at = append(at, i)
		}
	}
	if len(candidates) == 0 {
		return p
	}
	// Confirmed against quorum reads made after the claims were listed:
	// the snapshot time stays p.At, which is before the listing.
	live, err := snapshot(ctx, r.fromServer, candidates, p.At)
	if err != nil {
		p.Err = fmt.Errorf("kubegc: confirming %d releases: %w", len(candidates), err)
		for _, i := range at {
			p.Decisions[i].Err = p.Err
		}
		return p
	}
	now := time.Now()
	var errs []error
	for k, d := range gc.Decide(candidates, live, now, r.opts.GC) {
		i := at[k]
		if !d.Release {
			p.Decisions[i] = d
			continue
		}
		d.Err = r.alloc.ReleaseClaimAt(ctx, d.Claim, now)
		switch {
		case d.Err == nil:
			d.Applied = true
			r.log.Info("kubegc: released", "pool", d.Claim.Pool, "ip", d.Claim.IP, "reason", d.Reason, "why", d.Message)
			r.recordReleased(d)
		case errors.Is(d.Err, ipam.ErrConflict), errors.Is(d.Err, ipam.ErrNotFound):
			// Changed or released since it was listed: not ours any more.
		default:
			errs = append(errs, d.Err)
		}
		p.Decisions[i] = d
	}
	p.Err = errors.Join(errs...)
	return p
}

// recordReleased records the Event of a release applied, on the claim's pod.
func (r *Runner) recordReleased(d gc.Decision) {
	o := d.Claim.Owner
	if r.opts.Events == nil || o.Name == "" {
		return
	}
	pod := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
	r.opts.Events.Eventf(pod, nil, corev1.EventTypeNormal, EventReleased, "ReleaseIP", "%s",
		eventnote.Sprintf("released %s of pool %s (interface %s): %s: %s", d.Claim.IP, d.Claim.Pool, o.Interface, d.Reason, d.Message))
}

// view is where a pass reads the cluster: the informers' caches or the API
// server. Each method returns nil and no error for an object that does not
// exist.
type view interface {
	pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	podByUID(ctx context.Context, uid string) (*corev1.Pod, error)
	node(ctx context.Context, name string) (*corev1.Node, error)
	statefulSet(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, error)
}

// snapshot builds the snapshot, at time at, of the pods and StatefulSets
// that claims name: each claim's pod (by namespace and name, or by UID for
// an owner without a name), the node of each such pod, and the StatefulSet
// that a name of the form <set>-<ordinal> would belong to.
func snapshot(ctx context.Context, v view, claims []store.Claim, at time.Time) (*gc.Snapshot, error) {
	type nsName struct{ ns, name string }
	seenPods, seenSets := map[nsName]bool{}, map[nsName]bool{}
	seenUIDs := map[string]bool{}
	nodes := map[string]*corev1.Node{}
	var pods []gc.Pod
	var sets []gc.StatefulSet
	addPod := func(p *corev1.Pod) error {
		if p == nil || seenUIDs[string(p.UID)] {
			return nil
		}
		seenUIDs[string(p.UID)] = true
		seenPods[nsName{p.Namespace, p.Name}] = true
		n, ok := nodes[p.Spec.NodeName]
		if !ok && p.Spec.NodeName != "" {
			var err error
			if n, err = v.node(ctx, p.Spec.NodeName); err != nil {
				return err
			}
			nodes[p.Spec.NodeName] = n
		}
		pods = append(pods, k8s.GCPod(p, n))
		return nil
	}
	for _, c := range claims {
		o := c.Owner
		if o.UID == "" {
			continue // not a pod's claim: gc.Decide keeps it
		}
		if o.Name == "" {
			if seenUIDs[o.UID] {
				continue
			}
			p, err := v.podByUID(ctx, o.UID)
			if err != nil {
				return nil, err
			}
			if err := addPod(p); err != nil {
				return nil, err
			}
			continue
		}
		k := nsName{o.Namespace, o.Name}
		if !seenPods[k] {
			seenPods[k] = true
			p, err := v.pod(ctx, o.Namespace, o.Name)
			if err != nil {
				return nil, err
			}
			if err := addPod(p); err != nil {
				return nil, err
			}
		}
		if set, ok := setName(o.Name); ok && !seenSets[nsName{o.Namespace, set}] {
			seenSets[nsName{o.Namespace, set}] = true
			s, err := v.statefulSet(ctx, o.Namespace, set)
			if err != nil {
				return nil, err
			}
			if s != nil {
				sets = append(sets, k8s.GCStatefulSet(s))
			}
		}
	}
	snap, err := gc.NewSnapshot(at, pods, sets)
	if err != nil {
		return nil, fmt.Errorf("kubegc: %w", err)
	}
	return snap, nil
}

// setName returns the StatefulSet a pod name would belong to: the part
// before the last "-" when what follows it is a number.
func setName(pod string) (string, bool) {
	for i := len(pod) - 1; i >= 0; i-- {
		switch c := pod[i]; {
		case c == '-':
			return pod[:i], i > 0 && i < len(pod)-1
		case c < '0' || c > '9':
			return "", false
		}
	}
	return "", false
}
