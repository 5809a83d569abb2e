package gc_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// gcBase is the time every GC test is stated against: snapshots are taken at
// it, deletion timestamps and finish times are offsets from it.
var gcBase = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// gcClaim is a claim by pod default/name with uid, made an hour before gcBase.
func gcClaim(name, uid string) store.Claim {
	return store.Claim{
		Pool:     "p",
		IP:       netip.MustParseAddr("10.0.0.10"),
		Owner:    store.Owner{Namespace: "default", Name: name, UID: uid, Interface: "eth0"},
		Time:     gcBase.Add(-time.Hour),
		Revision: 7,
	}
}

// gcPod is pod default/name with uid, Running with addresses on a Ready node,
// changed by mods.
func gcPod(name, uid string, mods ...func(*gc.Pod)) gc.Pod {
	p := gc.Pod{Namespace: "default", Name: name, UID: uid, Phase: gc.PodRunning, NodeReady: true, HasIPs: true}
	for _, m := range mods {
		m(&p)
	}
	return p
}

// Pod modifiers.
var (
	noIPs    = func(p *gc.Pod) { p.HasIPs = false }
	notReady = func(p *gc.Pod) { p.NodeReady = false }
	inSts    = func(p *gc.Pod) { p.ControllerKind = gc.KindStatefulSet }
	hostNet  = func(p *gc.Pod) { p.HostNetwork = true }
)

func phase(ph gc.PodPhase) func(*gc.Pod) { return func(p *gc.Pod) { p.Phase = ph } }

// deleting sets the deletion timestamp to gcBase+at with grace period 30s.
func deleting(at time.Duration) func(*gc.Pod) {
	return func(p *gc.Pod) {
		p.DeletionTimestamp = gcBase.Add(at)
		p.DeletionGracePeriod = 30 * time.Second
	}
}

// finishedAt makes the pod ph, its containers finished at gcBase+at, with a
// termination grace period of 30s.
func finishedAt(ph gc.PodPhase, at time.Duration) func(*gc.Pod) {
	return func(p *gc.Pod) {
		p.Phase = ph
		p.FinishedAt = gcBase.Add(at)
		p.TerminationGracePeriod = 30 * time.Second
	}
}

func sts(name string, replicas, start int) gc.StatefulSet {
	return gc.StatefulSet{Namespace: "default", Name: name, Replicas: replicas, OrdinalsStart: start}
}

type gcCase struct {
	name  string
	claim store.Claim
	pods  []gc.Pod
	sets  []gc.StatefulSet
	now   time.Duration // offset from gcBase
	opts  gc.Options
	// want
	release bool
	reason  gc.Reason
	msg     []string // facts the message must state
}

func withTime(c store.Claim, t time.Time) store.Claim { c.Time = t; return c }

func uidOnly(c store.Claim) store.Claim {
	c.Owner.Namespace, c.Owner.Name = "", ""
	return c
}

func inNS(c store.Claim, ns string) store.Claim { c.Owner.Namespace = ns; return c }

func gcCases() []gcCase {
	const u1, u2 = "u1", "u2"
	web := []gc.StatefulSet{sts("web", 3, 0)}
	web5 := []gc.StatefulSet{sts("web", 3, 5)} // ordinals 5..7
	return []gcCase{
		// Who owns the claim, and when it was made.
		{
			name:   "container-ID claim is not pod-owned",
			claim:  store.Claim{Pool: "p", IP: netip.MustParseAddr("10.0.0.3"), Owner: store.Owner{ContainerID: "c1", Interface: "eth0"}, Time: gcBase.Add(-time.Hour)},
			reason: gc.KeepNotPodOwned, msg: []string{"p/10.0.0.3", "container c1"},
		},
		{
			name:   "claimed exactly at the snapshot time is kept",
			claim:  withTime(gcClaim("app", u1), gcBase),
			reason: gc.KeepClaimedAfterSnapshot, msg: []string{"2026-07-01T12:00:00Z"},
		},
		{
			name:   "claimed after the snapshot is kept",
			claim:  withTime(gcClaim("app", u1), gcBase.Add(time.Second)),
			reason: gc.KeepClaimedAfterSnapshot,
		},
		{
			name:    "claimed 1ns before the snapshot, pod gone, is released",
			claim:   withTime(gcClaim("app", u1), gcBase.Add(-time.Nanosecond)),
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:   "clock skew: claimed exactly skew before the snapshot is kept",
			claim:  withTime(gcClaim("app", u1), gcBase.Add(-time.Second)),
			opts:   gc.Options{ClockSkew: time.Second},
			reason: gc.KeepClaimedAfterSnapshot, msg: []string{"clock skew 1s"},
		},
		{
			name:    "clock skew: claimed just more than skew before is judged",
			claim:   withTime(gcClaim("app", u1), gcBase.Add(-time.Second-time.Nanosecond)),
			opts:    gc.Options{ClockSkew: time.Second},
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "claim without a time counts as old",
			claim:   withTime(gcClaim("app", u1), time.Time{}),
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:   "negative clock skew counts as zero",
			claim:  withTime(gcClaim("app", u1), gcBase),
			opts:   gc.Options{ClockSkew: -time.Hour},
			reason: gc.KeepClaimedAfterSnapshot,
		},

		// Pod gone.
		{
			name:    "SP-55 pod deleted before its endpoint: claim released",
			claim:   gcClaim("app", u1),
			release: true, reason: gc.ReleasePodGone, msg: []string{"default/app (uid u1)"},
		},
		{
			name:   "SP-47 StatefulSet pod deleted for recreation: valid member kept",
			claim:  gcClaim("web-1", u1),
			sets:   web,
			reason: gc.KeepStatefulSetMember, msg: []string{"ordinal 1 is within StatefulSet default/web's ordinals 0-2"},
		},
		{
			name:   "StatefulSet pod gone: last ordinal kept",
			claim:  gcClaim("web-2", u1),
			sets:   web,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:    "StatefulSet scaled down: gone pod past replicas released",
			claim:   gcClaim("web-3", u1),
			sets:    web,
			release: true, reason: gc.ReleasePodGone, msg: []string{"ordinal 3 is outside StatefulSet default/web's ordinals 0-2"},
		},
		{
			name:    "StatefulSet scaled to zero: gone pod released",
			claim:   gcClaim("web-0", u1),
			sets:    []gc.StatefulSet{sts("web", 0, 0)},
			release: true, reason: gc.ReleasePodGone, msg: []string{"0 replicas"},
		},
		{
			name:    "StatefulSet missing: gone pod released",
			claim:   gcClaim("web-1", u1),
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "StatefulSet in another namespace does not count",
			claim:   inNS(gcClaim("web-1", u1), "other"),
			sets:    web,
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:   "ordinals.start: first ordinal kept",
			claim:  gcClaim("web-5", u1),
			sets:   web5,
			reason: gc.KeepStatefulSetMember, msg: []string{"ordinals 5-7"},
		},
		{
			name:   "ordinals.start: last ordinal kept",
			claim:  gcClaim("web-7", u1),
			sets:   web5,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:    "ordinals.start: one past the last released",
			claim:   gcClaim("web-8", u1),
			sets:    web5,
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "ordinals.start: below start released",
			claim:   gcClaim("web-4", u1),
			sets:    web5,
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "name without an ordinal is no member",
			claim:   gcClaim("web", u1),
			sets:    []gc.StatefulSet{sts("web", 3, 0)},
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:   "set name is everything before the last dash",
			claim:  gcClaim("my-db-2", u1),
			sets:   []gc.StatefulSet{sts("my-db", 3, 0), sts("my", 10, 0)},
			reason: gc.KeepStatefulSetMember, msg: []string{"default/my-db's"},
		},
		{
			name:    "huge ordinal is no member",
			claim:   gcClaim("web-99999999999999999999999", u1),
			sets:    web,
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "DisableStatefulSet: gone valid member released",
			claim:   gcClaim("web-1", u1),
			sets:    web,
			opts:    gc.Options{DisableStatefulSet: true},
			release: true, reason: gc.ReleasePodGone,
		},
		{
			name:    "UID-only claim, no pod with that UID: released",
			claim:   uidOnly(gcClaim("app", u1)),
			pods:    []gc.Pod{gcPod("app", u2)},
			release: true, reason: gc.ReleasePodGone, msg: []string{"uid u1"},
		},
		{
			name:   "UID-only claim is matched by UID",
			claim:  uidOnly(gcClaim("app", u1)),
			pods:   []gc.Pod{gcPod("app", u1)},
			reason: gc.KeepRunning,
		},
		{
			name:   "SP-53 pod of the same name in another namespace is kept",
			claim:  inNS(gcClaim("app", u1), "ns1"),
			pods:   []gc.Pod{gcPod("app", u1, func(p *gc.Pod) { p.Namespace = "ns1" })},
			reason: gc.KeepRunning,
		},
		{
			name:    "SP-53 deleted pod's claim released although ns1 has the name",
			claim:   inNS(gcClaim("app", u2), "ns2"),
			pods:    []gc.Pod{gcPod("app", u1, func(p *gc.Pod) { p.Namespace = "ns1" })},
			release: true, reason: gc.ReleasePodGone, msg: []string{"ns2/app"},
		},

		// UID mismatch.
		{
			name:    "SP-52 stateless pod recreated with another UID: released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u2)},
			release: true, reason: gc.ReleaseUIDMismatch, msg: []string{"uid u2", "u1"},
		},
		{
			name:   "SP-44 StatefulSet pod recreated, no IPs yet: kept for reuse",
			claim:  gcClaim("web-0", u1),
			pods:   []gc.Pod{gcPod("web-0", u2, inSts, phase(gc.PodPending), noIPs)},
			sets:   web,
			reason: gc.KeepStatefulSetReuse,
		},
		{
			name:   "StatefulSet pod recreated, Running without IPs: kept for reuse",
			claim:  gcClaim("web-0", u1),
			pods:   []gc.Pod{gcPod("web-0", u2, inSts, noIPs)},
			sets:   web,
			reason: gc.KeepStatefulSetReuse,
		},
		{
			name:    "StatefulSet pod recreated and already has IPs: released",
			claim:   gcClaim("web-0", u1),
			pods:    []gc.Pod{gcPod("web-0", u2, inSts)},
			sets:    web,
			release: true, reason: gc.ReleaseUIDMismatch, msg: []string{"already reports addresses"},
		},
		{
			name:    "StatefulSet pod recreated but scaled away: released",
			claim:   gcClaim("web-3", u1),
			pods:    []gc.Pod{gcPod("web-3", u2, inSts, noIPs)},
			sets:    web,
			release: true, reason: gc.ReleaseUIDMismatch, msg: []string{"outside"},
		},
		{
			name:    "StatefulSet pod recreated, StatefulSet missing: released",
			claim:   gcClaim("web-0", u1),
			pods:    []gc.Pod{gcPod("web-0", u2, inSts, noIPs)},
			release: true, reason: gc.ReleaseUIDMismatch, msg: []string{"no StatefulSet default/web exists"},
		},
		{
			name:    "DisableStatefulSet: recreated member released",
			claim:   gcClaim("web-0", u1),
			pods:    []gc.Pod{gcPod("web-0", u2, inSts, noIPs)},
			sets:    web,
			opts:    gc.Options{DisableStatefulSet: true},
			release: true, reason: gc.ReleaseUIDMismatch,
		},
		{
			name:    "a stateless pod named like a member is stateless",
			claim:   gcClaim("web-0", u1),
			pods:    []gc.Pod{gcPod("web-0", u2, noIPs, func(p *gc.Pod) { p.ControllerKind = "ReplicaSet" })},
			sets:    web,
			release: true, reason: gc.ReleaseUIDMismatch,
		},
		{
			name:    "hostNetwork pod that took the name: old claim released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u2, hostNet)},
			release: true, reason: gc.ReleaseUIDMismatch,
		},

		// Host network.
		{
			name:   "hostNetwork pod is ignored",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, hostNet, noIPs)},
			opts:   gc.Options{ReleaseRunningWithoutIPs: true},
			reason: gc.KeepHostNetwork,
		},
		{
			name:   "hostNetwork pod terminating past its deadline is ignored",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, hostNet, deleting(-time.Hour))},
			reason: gc.KeepHostNetwork,
		},

		// Pending, Running, Unknown.
		{
			name:   "Pending pod kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, phase(gc.PodPending), noIPs)},
			reason: gc.KeepPending,
		},
		{
			name:   "Pending pod terminating past its deadline on a NotReady node kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, phase(gc.PodPending), noIPs, notReady, deleting(-time.Hour))},
			reason: gc.KeepPending,
		},
		{
			name:   "pod without a phase counts as Pending",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, phase(""), noIPs, deleting(-time.Hour))},
			opts:   gc.Options{ReleaseRunningWithoutIPs: true},
			reason: gc.KeepPending,
		},
		{
			name:   "Running pod with IPs kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1)},
			reason: gc.KeepRunning,
		},
		{
			name:   "Unknown pod with IPs kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, phase(gc.PodUnknown), notReady)},
			reason: gc.KeepRunning,
		},
		{
			name:   "Running pod without IPs kept by default",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, noIPs)},
			reason: gc.KeepRunningWithoutIPs,
		},
		{
			name:    "Running pod without IPs released with ReleaseRunningWithoutIPs",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, noIPs)},
			opts:    gc.Options{ReleaseRunningWithoutIPs: true},
			release: true, reason: gc.ReleaseRunningWithoutIPs,
		},
		{
			name:   "Unknown pod without IPs kept by default (unlike Spiderpool's scan)",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, phase(gc.PodUnknown), noIPs)},
			reason: gc.KeepRunningWithoutIPs,
		},
		{
			name:    "Unknown pod without IPs released with ReleaseRunningWithoutIPs",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, phase(gc.PodUnknown), noIPs)},
			opts:    gc.Options{ReleaseRunningWithoutIPs: true},
			release: true, reason: gc.ReleaseRunningWithoutIPs,
		},
		{
			name:   "valid StatefulSet pod Running without IPs kept even with the flag",
			claim:  gcClaim("web-0", u1),
			pods:   []gc.Pod{gcPod("web-0", u1, inSts, noIPs)},
			sets:   web,
			opts:   gc.Options{ReleaseRunningWithoutIPs: true},
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:    "invalid StatefulSet pod Running without IPs released without the flag",
			claim:   gcClaim("web-3", u1),
			pods:    []gc.Pod{gcPod("web-3", u1, inSts, noIPs)},
			sets:    web,
			release: true, reason: gc.ReleaseStatefulSetInvalid,
		},
		{
			name:   "invalid StatefulSet pod Running with IPs kept",
			claim:  gcClaim("web-3", u1),
			pods:   []gc.Pod{gcPod("web-3", u1, inSts)},
			sets:   web,
			reason: gc.KeepRunning,
		},

		// Terminating: deletion timestamp at gcBase, grace 30s.
		{
			name:   "terminating 1ns before the deletion timestamp kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(0))},
			now:    -time.Nanosecond,
			reason: gc.KeepTerminating, msg: []string{"deletion timestamp 2026-07-01T12:00:00Z", "releasable from 2026-07-01T12:00:00Z", "now 2026-07-01T11:59:59.999999999Z"},
		},
		{
			name:    "terminating exactly at the deletion timestamp released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(0))},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:    "SP-49 released at T+delay, not T+grace+delay (the grace is in T already)",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(0), notReady)},
			now:     time.Second,
			release: true, reason: gc.ReleaseTerminating, msg: []string{"grace 30s"},
		},
		{
			name:   "additional delay: 1ns before T+delay kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(0))},
			now:    5*time.Second - time.Nanosecond,
			opts:   gc.Options{AdditionalGraceDelay: 5 * time.Second},
			reason: gc.KeepTerminating, msg: []string{"releasable from 2026-07-01T12:00:05Z", "additional delay 5s"},
		},
		{
			name:    "additional delay: exactly at T+delay released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(0))},
			now:     5 * time.Second,
			opts:    gc.Options{AdditionalGraceDelay: 5 * time.Second},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:   "negative additional delay counts as zero",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(0))},
			now:    -time.Nanosecond,
			opts:   gc.Options{AdditionalGraceDelay: -time.Hour},
			reason: gc.KeepTerminating,
		},
		{
			name:   "Ready node, GC on Ready nodes disabled: kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(0))},
			now:    time.Hour,
			opts:   gc.Options{DisableTerminatingOnReadyNode: true},
			reason: gc.KeepReadyNode,
		},
		{
			name:    "Ready node, GC on NotReady nodes disabled: released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(0))},
			now:     time.Hour,
			opts:    gc.Options{DisableTerminatingOnNotReadyNode: true},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:   "SP-49 flag false: NotReady node, GC on NotReady nodes disabled: kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(0), notReady)},
			now:    time.Hour,
			opts:   gc.Options{DisableTerminatingOnNotReadyNode: true},
			reason: gc.KeepNotReadyNode,
		},
		{
			name:    "NotReady node, GC on Ready nodes disabled: released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(0), notReady)},
			now:     time.Hour,
			opts:    gc.Options{DisableTerminatingOnReadyNode: true},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:    "terminating without IPs before the deadline released at once",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, deleting(time.Hour), noIPs)},
			release: true, reason: gc.ReleaseTerminatingWithoutIPs, msg: []string{"no addresses"},
		},
		{
			name:   "terminating without IPs on a NotReady node, flag off: kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(time.Hour), noIPs, notReady)},
			opts:   gc.Options{DisableTerminatingOnNotReadyNode: true},
			reason: gc.KeepNotReadyNode,
		},
		{
			name:   "terminating without IPs on a Ready node, flag off: kept",
			claim:  gcClaim("app", u1),
			pods:   []gc.Pod{gcPod("app", u1, deleting(time.Hour), noIPs)},
			opts:   gc.Options{DisableTerminatingOnReadyNode: true},
			reason: gc.KeepReadyNode,
		},
		{
			name:    "Unknown pod terminating past the deadline released",
			claim:   gcClaim("app", u1),
			pods:    []gc.Pod{gcPod("app", u1, phase(gc.PodUnknown), deleting(-time.Minute), notReady)},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:   "valid StatefulSet member terminating past the deadline kept",
			claim:  gcClaim("web-1", u1),
			pods:   []gc.Pod{gcPod("web-1", u1, inSts, deleting(-time.Hour))},
			sets:   web,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:   "valid StatefulSet member terminating without IPs kept",
			claim:  gcClaim("web-1", u1),
			pods:   []gc.Pod{gcPod("web-1", u1, inSts, deleting(time.Hour), noIPs)},
			sets:   web,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:    "invalid StatefulSet member terminating past the deadline released",
			claim:   gcClaim("web-5", u1),
			pods:    []gc.Pod{gcPod("web-5", u1, inSts, deleting(-time.Hour))},
			sets:    web,
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:   "invalid StatefulSet member terminating before the deadline kept",
			claim:  gcClaim("web-5", u1),
			pods:   []gc.Pod{gcPod("web-5", u1, inSts, deleting(time.Hour))},
			sets:   web,
			reason: gc.KeepTerminating,
		},
		{
			name:   "invalid StatefulSet member past the deadline on a NotReady node, flag off: kept",
			claim:  gcClaim("web-5", u1),
			pods:   []gc.Pod{gcPod("web-5", u1, inSts, deleting(-time.Hour), notReady)},
			sets:   web,
			opts:   gc.Options{DisableTerminatingOnNotReadyNode: true},
			reason: gc.KeepNotReadyNode,
		},
		{
			name:    "DisableStatefulSet: valid member terminating past the deadline released",
			claim:   gcClaim("web-1", u1),
			pods:    []gc.Pod{gcPod("web-1", u1, inSts, deleting(-time.Hour))},
			sets:    web,
			opts:    gc.Options{DisableStatefulSet: true},
			release: true, reason: gc.ReleaseTerminating,
		},

		// Succeeded and Failed: finished at gcBase, termination grace 30s.
		{
			name:   "SP-50 Succeeded: 1ns before F+grace kept",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0))},
			now:    30*time.Second - time.Nanosecond,
			reason: gc.KeepFinished, msg: []string{"Succeeded since 2026-07-01T12:00:00Z", "releasable from 2026-07-01T12:00:30Z"},
		},
		{
			name:    "SP-50 Succeeded: exactly at F+grace released",
			claim:   gcClaim("job", u1),
			pods:    []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0))},
			now:     30 * time.Second,
			release: true, reason: gc.ReleaseFinished,
		},
		{
			name:    "SP-50 Failed: exactly at F+grace released",
			claim:   gcClaim("job", u1),
			pods:    []gc.Pod{gcPod("job", u1, finishedAt(gc.PodFailed, 0), noIPs)},
			now:     30 * time.Second,
			release: true, reason: gc.ReleaseFinished,
		},
		{
			name:   "SP-50 additional delay: 1ns before F+grace+delay kept",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0))},
			now:    35*time.Second - time.Nanosecond,
			opts:   gc.Options{AdditionalGraceDelay: 5 * time.Second},
			reason: gc.KeepFinished,
		},
		{
			name:    "SP-50 additional delay: exactly at F+grace+delay released",
			claim:   gcClaim("job", u1),
			pods:    []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0))},
			now:     35 * time.Second,
			opts:    gc.Options{AdditionalGraceDelay: 5 * time.Second},
			release: true, reason: gc.ReleaseFinished,
		},
		{
			name:   "finished on a Ready node, flag off: kept",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0))},
			now:    time.Hour,
			opts:   gc.Options{DisableTerminatingOnReadyNode: true},
			reason: gc.KeepReadyNode,
		},
		{
			name:   "finished on a NotReady node, flag off: kept",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, finishedAt(gc.PodFailed, 0), notReady)},
			now:    time.Hour,
			opts:   gc.Options{DisableTerminatingOnNotReadyNode: true},
			reason: gc.KeepNotReadyNode,
		},
		{
			name:   "finished, finish time unknown, not terminating: kept",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, phase(gc.PodFailed))},
			now:    time.Hour,
			reason: gc.KeepFinishedTimeUnknown,
		},
		{
			name:    "finished, finish time unknown, terminating past the deadline: released",
			claim:   gcClaim("job", u1),
			pods:    []gc.Pod{gcPod("job", u1, phase(gc.PodFailed), deleting(0))},
			release: true, reason: gc.ReleaseTerminating,
		},
		{
			name:   "finished and terminating: the finish deadline decides",
			claim:  gcClaim("job", u1),
			pods:   []gc.Pod{gcPod("job", u1, finishedAt(gc.PodSucceeded, 0), deleting(-time.Minute))},
			now:    10 * time.Second,
			reason: gc.KeepFinished,
		},
		{
			name:   "valid StatefulSet member Succeeded kept",
			claim:  gcClaim("web-0", u1),
			pods:   []gc.Pod{gcPod("web-0", u1, inSts, finishedAt(gc.PodSucceeded, -time.Hour))},
			sets:   web,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:   "valid StatefulSet member Failed and terminating kept",
			claim:  gcClaim("web-0", u1),
			pods:   []gc.Pod{gcPod("web-0", u1, inSts, finishedAt(gc.PodFailed, -time.Hour), deleting(-time.Hour))},
			sets:   web,
			reason: gc.KeepStatefulSetMember,
		},
		{
			name:    "invalid StatefulSet member Failed released at once",
			claim:   gcClaim("web-0", u1),
			pods:    []gc.Pod{gcPod("web-0", u1, inSts, finishedAt(gc.PodFailed, 0))},
			sets:    []gc.StatefulSet{sts("web", 0, 0)},
			release: true, reason: gc.ReleaseStatefulSetInvalid,
		},
	}
}

func TestDecideGC(t *testing.T) {
	for _, tc := range gcCases() {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := gc.NewSnapshot(gcBase, tc.pods, tc.sets)
			require.NoError(t, err)
			got := gc.Decide([]store.Claim{tc.claim}, snap, gcBase.Add(tc.now), tc.opts)
			require.Len(t, got, 1)
			d := got[0]
			require.Equal(t, tc.reason, d.Reason, "message: %s", d.Message)
			require.Equal(t, tc.release, d.Release, "message: %s", d.Message)
			if diff := cmp.Diff(tc.claim, d.Claim, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("claim changed (-want +got):\n%s", diff)
			}
			require.False(t, d.Applied)
			require.NoError(t, d.Err)
			for _, s := range tc.msg {
				require.Contains(t, d.Message, s)
			}
			require.NotContains(t, d.Message, "%!", "bad format verb")
		})
	}
}

// Every reason is produced by some case of the table, and keep and release
// reasons never mix.
func TestDecideGCReasonsCovered(t *testing.T) {
	release := map[gc.Reason]bool{}
	for _, tc := range gcCases() {
		if prev, ok := release[tc.reason]; ok {
			require.Equal(t, prev, tc.release, "reason %s is both keep and release", tc.reason)
		}
		release[tc.reason] = tc.release
	}
	release[gc.KeepNoSnapshot] = false // TestDecideGCNilSnapshot
	all := []gc.Reason{
		gc.ReleasePodGone, gc.ReleaseUIDMismatch, gc.ReleaseTerminating,
		gc.ReleaseTerminatingWithoutIPs, gc.ReleaseFinished, gc.ReleaseStatefulSetInvalid,
		gc.ReleaseRunningWithoutIPs,
		gc.KeepNotPodOwned, gc.KeepNoSnapshot, gc.KeepClaimedAfterSnapshot,
		gc.KeepStatefulSetMember, gc.KeepStatefulSetReuse, gc.KeepHostNetwork,
		gc.KeepPending, gc.KeepRunning, gc.KeepRunningWithoutIPs, gc.KeepTerminating,
		gc.KeepFinished, gc.KeepFinishedTimeUnknown, gc.KeepReadyNode, gc.KeepNotReadyNode,
	}
	for _, r := range all {
		_, ok := release[r]
		require.True(t, ok, "no case produces %s", r)
	}
	require.Len(t, release, len(all), "a reason in the table is missing from the list")
	seen := map[gc.Reason]bool{}
	for _, r := range all {
		require.False(t, seen[r], "duplicate value %q", r)
		seen[r] = true
	}
}

func TestDecideGCNilSnapshot(t *testing.T) {
	claims := []store.Claim{
		gcClaim("app", "u1"),
		{Pool: "p", IP: netip.MustParseAddr("10.0.0.3"), Owner: store.Owner{ContainerID: "c1"}},
	}
	got := gc.Decide(claims, nil, gcBase, gc.Options{})
	require.Len(t, got, 2)
	require.Equal(t, gc.KeepNoSnapshot, got[0].Reason)
	require.False(t, got[0].Release)
	require.Equal(t, gc.KeepNotPodOwned, got[1].Reason)
	require.False(t, got[1].Release)
}

// The zero Snapshot keeps every claim that records a time, and has no pods
// for the others.
func TestDecideGCZeroSnapshot(t *testing.T) {
	claims := []store.Claim{gcClaim("app", "u1"), withTime(gcClaim("app", "u1"), time.Time{})}
	got := gc.Decide(claims, &gc.Snapshot{}, gcBase, gc.Options{})
	require.Equal(t, gc.KeepClaimedAfterSnapshot, got[0].Reason)
	require.False(t, got[0].Release)
	require.Equal(t, gc.ReleasePodGone, got[1].Reason)
	require.True(t, got[1].Release)
}

// One decision per claim, in order, with the claim as given; the input is not
// changed and the same input gives the same output.
func TestDecideGCOrder(t *testing.T) {
	claims := []store.Claim{
		gcClaim("gone", "u1"),
		gcClaim("alive", "u2"),
		{Pool: "p", IP: netip.MustParseAddr("10.0.0.3"), Owner: store.Owner{ContainerID: "c1"}, Revision: 3},
		gcClaim("web-1", "u4"),
	}
	for i := range claims {
		claims[i].IP = netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)})
	}
	before := slices.Clone(claims)
	snap, err := gc.NewSnapshot(gcBase, []gc.Pod{gcPod("alive", "u2")}, []gc.StatefulSet{sts("web", 2, 0)})
	require.NoError(t, err)

	got := gc.Decide(claims, snap, gcBase, gc.Options{})
	want := []gc.Decision{
		{Claim: claims[0], Release: true, Reason: gc.ReleasePodGone},
		{Claim: claims[1], Reason: gc.KeepRunning},
		{Claim: claims[2], Reason: gc.KeepNotPodOwned},
		{Claim: claims[3], Reason: gc.KeepStatefulSetMember},
	}
	opts := cmp.Options{cmpopts.EquateComparable(netip.Addr{}), cmpopts.IgnoreFields(gc.Decision{}, "Message")}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, claims, opts); diff != "" {
		t.Errorf("input changed (-want +got):\n%s", diff)
	}
	again := gc.Decide(claims, snap, gcBase, gc.Options{})
	if diff := cmp.Diff(got, again, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("not deterministic (-first +second):\n%s", diff)
	}
	require.Empty(t, gc.Decide(nil, snap, gcBase, gc.Options{}))
}

// Messages are whole sentences with the facts; these are pinned exactly.
func TestDecideGCMessages(t *testing.T) {
	snap, err := gc.NewSnapshot(gcBase,
		[]gc.Pod{gcPod("api", "u1", deleting(-10*time.Second))},
		[]gc.StatefulSet{sts("web", 2, 0)})
	require.NoError(t, err)
	got := gc.Decide([]store.Claim{gcClaim("api", "u1"), gcClaim("web-1", "u2"), gcClaim("web-2", "u3")},
		snap, gcBase, gc.Options{AdditionalGraceDelay: 5 * time.Second})
	want := []string{
		"pod default/api (uid u1) is terminating (deletion timestamp 2026-07-01T11:59:50Z, grace 30s); releasable from 2026-07-01T11:59:55Z (additional delay 5s); now 2026-07-01T12:00:00Z",
		"pod default/web-1 (uid u2) no longer exists, but ordinal 1 is within StatefulSet default/web's ordinals 0-1: its recreated pod will reuse p/10.0.0.10",
		"pod default/web-2 (uid u3) no longer exists and ordinal 2 is outside StatefulSet default/web's ordinals 0-1",
	}
	var msgs []string
	for _, d := range got {
		msgs = append(msgs, d.Message)
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}

// SP-44 as a sequence: a StatefulSet's pods are all deleted, recreated under
// new UIDs, and take their claims over; no snapshot along the way releases
// anything.
func TestDecideGCScenarioSP44(t *testing.T) {
	set := []gc.StatefulSet{sts("test-sts", 2, 0)}
	claims := []store.Claim{gcClaim("test-sts-0", "old0"), gcClaim("test-sts-1", "old1")}
	claims[1].IP = netip.MustParseAddr("10.0.0.11")

	steps := []struct {
		name string
		pods []gc.Pod
		want gc.Reason
	}{
		{"pods deleted", nil, gc.KeepStatefulSetMember},
		{"pods recreated, Pending", []gc.Pod{
			gcPod("test-sts-0", "new0", inSts, phase(gc.PodPending), noIPs),
			gcPod("test-sts-1", "new1", inSts, phase(gc.PodPending), noIPs),
		}, gc.KeepStatefulSetReuse},
		{"old pods terminating past the deadline", []gc.Pod{
			gcPod("test-sts-0", "old0", inSts, deleting(-time.Hour), notReady),
			gcPod("test-sts-1", "old1", inSts, deleting(-time.Hour), noIPs),
		}, gc.KeepStatefulSetMember},
	}
	for _, st := range steps {
		snap, err := gc.NewSnapshot(gcBase, st.pods, set)
		require.NoError(t, err)
		for _, d := range gc.Decide(claims, snap, gcBase, gc.Options{}) {
			require.False(t, d.Release, "%s: %s", st.name, d.Message)
			require.Equal(t, st.want, d.Reason, "%s: %s", st.name, d.Message)
		}
	}

	// Scaled down to one replica: the second pod's claim goes once it is gone.
	snap, err := gc.NewSnapshot(gcBase, nil, []gc.StatefulSet{sts("test-sts", 1, 0)})
	require.NoError(t, err)
	got := gc.Decide(claims, snap, gcBase, gc.Options{})
	require.False(t, got[0].Release)
	require.True(t, got[1].Release)
	require.Equal(t, gc.ReleasePodGone, got[1].Reason)
}

func TestNewGCSnapshot(t *testing.T) {
	pods := []gc.Pod{gcPod("a", "u1"), gcPod("a", "u2", func(p *gc.Pod) { p.Namespace = "other" })}
	sets := []gc.StatefulSet{sts("web", 2, 0)}
	snap, err := gc.NewSnapshot(gcBase, pods, sets)
	require.NoError(t, err)
	require.Equal(t, gcBase, snap.Time())
	p, ok := snap.Pod("other", "a")
	require.True(t, ok)
	require.Equal(t, "u2", p.UID)
	_, ok = snap.Pod("default", "b")
	require.False(t, ok)
	s, ok := snap.StatefulSet("default", "web")
	require.True(t, ok)
	require.Equal(t, 2, s.Replicas)
	_, ok = snap.StatefulSet("other", "web")
	require.False(t, ok)

	// The snapshot keeps its own copy.
	pods[0].UID = "changed"
	p, _ = snap.Pod("default", "a")
	require.Equal(t, "u1", p.UID)
}

func TestNewGCSnapshotErrors(t *testing.T) {
	pods := []gc.Pod{
		{Namespace: "default", UID: "u0"},
		{Namespace: "default", Name: "a"},
		gcPod("b", "u2", phase("Sleeping")),
		gcPod("c", "u3", func(p *gc.Pod) { p.DeletionGracePeriod = -time.Second; p.TerminationGracePeriod = -time.Second }),
		gcPod("b", "u4"),
		gcPod("d", "u2"),
	}
	sets := []gc.StatefulSet{
		{Namespace: "default"},
		{Namespace: "default", Name: "web", Replicas: -1, OrdinalsStart: -2},
		sts("web", 1, 0),
	}
	snap, err := gc.NewSnapshot(gcBase, pods, sets)
	require.Nil(t, snap)
	require.ErrorIs(t, err, ipam.ErrInvalid)
	for _, want := range []string{
		`pods[0].name: required`,
		`pods[1].uid: required`,
		`pods[2].phase "Sleeping": not a pod phase`,
		`pods[3].deletionGracePeriod "-1s": negative`,
		`pods[3].terminationGracePeriod "-1s": negative`,
		`pods[4] "default/b": duplicate pod`,
		`pods[5].uid "u2": duplicate pod uid`,
		`statefulSets[0].name: required`,
		`statefulSets[1].replicas "-1": negative`,
		`statefulSets[1].ordinalsStart "-2": negative`,
		`statefulSets[2] "default/web": duplicate StatefulSet`,
	} {
		require.Contains(t, err.Error(), want)
	}
	var fe *ipam.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "gc snapshot", fe.Object)
}

func TestGCOptionsValidate(t *testing.T) {
	require.NoError(t, gc.Options{}.Validate())
	require.NoError(t, gc.Options{AdditionalGraceDelay: time.Second, ClockSkew: time.Second}.Validate())
	err := gc.Options{AdditionalGraceDelay: -time.Second, ClockSkew: -time.Millisecond}.Validate()
	require.ErrorIs(t, err, ipam.ErrInvalid)
	require.ErrorContains(t, err, `AdditionalGraceDelay "-1s": negative`)
	require.ErrorContains(t, err, `ClockSkew "-1ms": negative`)
}

// gcAllocator returns an Allocator over pool p, 10.0.0.2-10.0.0.6, on st.
func gcAllocator(t *testing.T, st store.Store) *ipam.Allocator {
	t.Helper()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	require.NoError(t, err)
	return a
}

// gcAllocate gives pod default/name (uid) one address in p, an hour before
// gcBase, and returns it. An empty uid makes name a container ID.
func gcAllocate(t *testing.T, a *ipam.Allocator, name, uid string) netip.Addr {
	t.Helper()
	return gcAllocateAt(t, a, name, uid, gcBase.Add(-time.Hour))
}

func gcAllocateAt(t *testing.T, a *ipam.Allocator, name, uid string, at time.Time) netip.Addr {
	t.Helper()
	req := ipam.Request{Namespace: "default", Name: name, UID: uid, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}
	if uid == "" {
		req = ipam.Request{ContainerID: name, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}
	}
	res, err := a.AllocateAt(context.Background(), req, at)
	require.NoError(t, err)
	require.Len(t, res.IPs, 1)
	return res.IPs[0].Address.Addr()
}

func heldBy(t *testing.T, a *ipam.Allocator) map[netip.Addr]string {
	t.Helper()
	cs, err := a.Claims(context.Background())
	require.NoError(t, err)
	out := map[netip.Addr]string{}
	for _, c := range cs {
		out[c.IP] = c.Owner.String()
	}
	return out
}

func TestCollectGarbage(t *testing.T) {
	ctx := context.Background()
	a := gcAllocator(t, memstore.New())
	alive := gcAllocate(t, a, "alive", "u1")
	gone := gcAllocate(t, a, "gone", "u2")
	term := gcAllocate(t, a, "term", "u3")
	cid := gcAllocate(t, a, "c1", "")

	snap, err := gc.NewSnapshot(gcBase, []gc.Pod{
		gcPod("alive", "u1"),
		gcPod("term", "u3", deleting(-time.Minute)),
	}, nil)
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.NoError(t, err)

	type verdict struct {
		IP      netip.Addr
		Release bool
		Applied bool
		Reason  gc.Reason
	}
	var got []verdict
	for _, d := range ds {
		require.NoError(t, d.Err)
		got = append(got, verdict{d.Claim.IP, d.Release, d.Applied, d.Reason})
	}
	want := []verdict{
		{alive, false, false, gc.KeepRunning},
		{gone, true, true, gc.ReleasePodGone},
		{term, true, true, gc.ReleaseTerminating},
		{cid, false, false, gc.KeepNotPodOwned},
	}
	slices.SortFunc(want, func(x, y verdict) int { return x.IP.Compare(y.IP) })
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Fatalf("decisions (-want +got):\n%s", diff)
	}
	require.Equal(t, map[netip.Addr]string{
		alive: "default/alive (uid u1) eth0",
		cid:   "container c1 eth0",
	}, heldBy(t, a))

	// The freed addresses can be handed out again: the pool has 5, 2 are
	// held, so 3 new pods fit, and they get the 2 freed ones and the spare.
	var fresh []netip.Addr
	for _, n := range []string{"n1", "n2", "n3"} {
		fresh = append(fresh, gcAllocateAt(t, a, n, "uid-"+n, gcBase))
	}
	require.Contains(t, fresh, gone)
	require.Contains(t, fresh, term)
	_, err = a.AllocateAt(ctx, ipam.Request{UID: "n4", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}, gcBase)
	require.ErrorIs(t, err, ipam.ErrExhausted)

	// A second run releases nothing more: the new claims are newer than the
	// snapshot.
	ds, err = gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.NoError(t, err)
	for _, d := range ds {
		require.False(t, d.Applied, "%s: %s", d.Claim.IP, d.Message)
	}
}

// hookStore calls before when Delete is asked for ip, before passing the call
// on (if before returns an error, Delete returns it instead), and after once
// the call has been passed on. Either hook may be nil.
type hookStore struct {
	store.Store
	ip     netip.Addr
	before func(ctx context.Context, pool string, ip netip.Addr, rev int64) error
	after  func()

	mu    sync.Mutex
	calls int // Delete calls for ip
	total int // Delete calls for any address
}

func (s *hookStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	s.mu.Lock()
	s.total++
	if ip == s.ip {
		s.calls++
	}
	s.mu.Unlock()
	if ip != s.ip {
		return s.Store.Delete(ctx, pool, ip, rev)
	}
	if s.before != nil {
		if err := s.before(ctx, pool, ip, rev); err != nil {
			return err
		}
	}
	err := s.Store.Delete(ctx, pool, ip, rev)
	if s.after != nil {
		s.after()
	}
	return err
}

// A StatefulSet pod's new incarnation takes the claim over (the Store's
// Update, as reuse does) after the collector inspected it and before it
// releases it: the claim survives, re-pointed, and the decision says the
// release was not applied. Collection carries on with the next claim.
func TestCollectGarbageRepointedClaimSurvives(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	hs := &hookStore{Store: mem}
	a := gcAllocator(t, hs)
	web := gcAllocate(t, a, "web-0", "old")
	other := gcAllocate(t, a, "gone", "u9")
	hs.ip = web
	hs.before = func(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
		cur, err := mem.Get(ctx, pool, ip)
		if err != nil {
			return err
		}
		cur.Owner.UID = "new"
		cur.Time = gcBase.Add(time.Second)
		_, err = mem.Update(ctx, cur, cur.Revision)
		return err
	}

	// The StatefulSet was scaled to zero when the snapshot was taken, so the
	// gone web-0's claim is judged releasable.
	snap, err := gc.NewSnapshot(gcBase, nil, []gc.StatefulSet{sts("web", 0, 0)})
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.NoError(t, err, "a lost race is not an error")
	require.Equal(t, 1, hs.calls)
	require.Len(t, ds, 2)

	byIP := map[netip.Addr]gc.Decision{}
	for _, d := range ds {
		byIP[d.Claim.IP] = d
	}
	dw := byIP[web]
	require.True(t, dw.Release)
	require.False(t, dw.Applied)
	require.ErrorIs(t, dw.Err, ipam.ErrConflict)
	require.Equal(t, "old", dw.Claim.Owner.UID, "the decision shows the claim as inspected")
	do := byIP[other]
	require.True(t, do.Applied)
	require.NoError(t, do.Err)

	c, err := mem.Get(ctx, "p", web)
	require.NoError(t, err, "the re-pointed claim must survive")
	require.Equal(t, "new", c.Owner.UID)
	_, err = mem.Get(ctx, "p", other)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A claim released by someone else (CNI DEL) between inspection and release
// is reported as not applied, without an error.
func TestCollectGarbageClaimAlreadyGone(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	hs := &hookStore{Store: mem}
	a := gcAllocator(t, hs)
	ip := gcAllocate(t, a, "gone", "u1")
	hs.ip = ip
	hs.before = func(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
		return mem.Delete(ctx, pool, ip, rev)
	}
	snap, err := gc.NewSnapshot(gcBase, nil, nil)
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.True(t, ds[0].Release)
	require.False(t, ds[0].Applied)
	require.ErrorIs(t, ds[0].Err, ipam.ErrNotFound)
}

// A Store failure on one claim is recorded on its decision and returned, and
// the other claims are still collected.
func TestCollectGarbageStoreError(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("disk on fire")
	hs := &hookStore{Store: memstore.New()}
	a := gcAllocator(t, hs)
	bad := gcAllocate(t, a, "a", "u1")
	good := gcAllocate(t, a, "b", "u2")
	hs.ip = bad
	hs.before = func(context.Context, string, netip.Addr, int64) error { return boom }

	snap, err := gc.NewSnapshot(gcBase, nil, nil)
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.ErrorIs(t, err, boom)
	require.Len(t, ds, 2)
	for _, d := range ds {
		require.True(t, d.Release)
		switch d.Claim.IP {
		case bad:
			require.False(t, d.Applied)
			require.ErrorIs(t, d.Err, boom)
		case good:
			require.True(t, d.Applied)
			require.NoError(t, d.Err)
		}
	}
	require.Equal(t, map[netip.Addr]string{bad: "default/a (uid u1) eth0"}, heldBy(t, a))
}

// When ctx ends during collection, the releases not yet tried are not tried,
// carry ctx's error, and the error is returned.
func TestCollectGarbageContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := &hookStore{Store: memstore.New()}
	a := gcAllocator(t, hs)
	first := gcAllocate(t, a, "a", "u1")
	gcAllocate(t, a, "b", "u2")
	gcAllocate(t, a, "c", "u3")
	// Cancel right after the first release is done in the Store.
	hs.ip = first
	hs.after = cancel

	snap, err := gc.NewSnapshot(gcBase, nil, nil)
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, ds, 3)
	require.Equal(t, first, ds[0].Claim.IP)
	require.True(t, ds[0].Applied)
	for _, d := range ds[1:] {
		require.True(t, d.Release)
		require.False(t, d.Applied)
		require.ErrorIs(t, d.Err, context.Canceled)
	}
	require.Len(t, heldBy(t, a), 2)
	require.Equal(t, 1, hs.total, "no release is tried once ctx is done")
}

func TestCollectGarbageRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	a := gcAllocator(t, memstore.New())
	ip := gcAllocate(t, a, "gone", "u1")
	snap, err := gc.NewSnapshot(gcBase, nil, nil)
	require.NoError(t, err)

	_, err = gc.Collect(ctx, a, snap, gcBase, gc.Options{AdditionalGraceDelay: -time.Second})
	require.ErrorIs(t, err, ipam.ErrInvalid)
	_, err = gc.Collect(ctx, a, nil, gcBase, gc.Options{})
	require.ErrorIs(t, err, ipam.ErrInvalid)
	require.Contains(t, heldBy(t, a), ip, "nothing is released on bad input")
}

// A claim of a pool that the PoolSource no longer has (a deleted
// SpiderIPPool) is collected when its pod is gone: Claims lists every claim
// the Store holds (store.ClaimLister), not only those of the source's pools.
// Before, such a claim held its address for good, in every pool, since a
// pool redefined onto it finds it through store.AddressReader.
func TestCollectGarbageDeletedPool(t *testing.T) {
	ctx := context.Background()
	src := ipamtest.NewSource() // not a Catalog: its pools may change
	src.Set(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st})
	require.NoError(t, err)
	ip := gcAllocate(t, a, "gone", "u1")
	src.Remove("p")
	src.Set(ipam.MustParsePool(`{"name":"q","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	snap, err := gc.NewSnapshot(gcBase, nil, nil)
	require.NoError(t, err)
	ds, err := gc.Collect(ctx, a, snap, gcBase, gc.Options{})
	require.NoError(t, err)
	require.Len(t, ds, 1, "decisions: %v", ds)
	require.True(t, ds[0].Applied, "decision: %+v", ds[0])
	left, err := st.AddressClaims(ctx, ip)
	require.NoError(t, err)
	require.Empty(t, left, "claims of %s after the collection", ip)
}
