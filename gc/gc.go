package gc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// fieldErrors collects the problems of one object as *ipam.FieldError values,
// every one reported at once.
type fieldErrors struct {
	object string
	errs   []error
}

func (fe *fieldErrors) add(field, value, reason string) {
	fe.errs = append(fe.errs, &ipam.FieldError{Object: fe.object, Field: field, Value: value, Reason: reason})
}

func (fe *fieldErrors) err() error { return errors.Join(fe.errs...) }

// PodPhase is a pod's status.phase, spelled as Kubernetes spells it, so that
// PodPhase(pod.Status.Phase) converts one.
//
// The zero PodPhase means the phase has not been reported yet and is treated
// as PodPending: the pod's claims are kept. A PodPhase is a plain value.
type PodPhase string

// The pod phases Kubernetes defines.
const (
	PodPending   PodPhase = "Pending"
	PodRunning   PodPhase = "Running"
	PodSucceeded PodPhase = "Succeeded"
	PodFailed    PodPhase = "Failed"
	PodUnknown   PodPhase = "Unknown"
)

// KindStatefulSet is the controller kind that gives a pod a stable identity:
// a pod whose ControllerKind is KindStatefulSet keeps its addresses across
// restarts while it is a valid member of its StatefulSet.
const KindStatefulSet = "StatefulSet"

// Pod is what garbage collection needs to know about one pod at the moment of
// a snapshot.
//
// The zero Pod is not valid in a snapshot (it has no name and no UID). A Pod
// is a plain value and safe to copy.
type Pod struct {
	// Namespace, Name and UID identify the pod. Claims are matched to pods by
	// namespace and name; a claim whose owner records only a UID is matched
	// by UID.
	Namespace, Name, UID string
	// Phase is status.phase.
	Phase PodPhase
	// DeletionTimestamp is metadata.deletionTimestamp; the zero time means the
	// pod is not terminating. Kubernetes sets it to the time of the delete
	// request plus the grace period, that is, to when the kubelet should have
	// killed the pod's containers.
	DeletionTimestamp time.Time
	// DeletionGracePeriod is metadata.deletionGracePeriodSeconds. It is
	// reported in messages only: DeletionTimestamp already includes it.
	DeletionGracePeriod time.Duration
	// TerminationGracePeriod is spec.terminationGracePeriodSeconds.
	TerminationGracePeriod time.Duration
	// FinishedAt is the latest finishedAt among the terminated states of the
	// pod's containers, for a Succeeded or Failed pod; zero if unknown.
	FinishedAt time.Time
	// NodeReady reports whether the pod's node is Ready. False covers a node
	// that is NotReady, Unknown or gone, and a pod with no node.
	NodeReady bool
	// HostNetwork is spec.hostNetwork.
	HostNetwork bool
	// HasIPs reports whether status.podIPs is non-empty.
	HasIPs bool
	// ControllerKind is the kind of the owner reference that has controller:
	// true, such as "StatefulSet" or "ReplicaSet"; empty for none. Only
	// KindStatefulSet changes the decisions; every other kind is stateless.
	ControllerKind string
}

// String returns "namespace/name (uid U)".
func (p Pod) String() string {
	return fmt.Sprintf("%s/%s (uid %s)", p.Namespace, p.Name, p.UID)
}

// StatefulSet is what garbage collection needs to know about one StatefulSet:
// which ordinals it currently wants.
//
// The zero StatefulSet is not valid in a snapshot (it has no name). A
// StatefulSet is a plain value and safe to copy.
type StatefulSet struct {
	Namespace, Name string
	// Replicas is spec.replicas; the caller resolves an unset field to 1, as
	// Kubernetes does.
	Replicas int
	// OrdinalsStart is spec.ordinals.start; unset is 0, which gives the same
	// rule as Spiderpool applies without spec.ordinals.
	OrdinalsStart int
}

// String returns "namespace/name".
func (s StatefulSet) String() string { return s.Namespace + "/" + s.Name }

// Snapshot is the cluster as one list of pods and StatefulSets showed it at
// one moment. Build it with NewSnapshot.
//
// The zero Snapshot has no pods and no time; since every claim that records
// a time is then newer than the snapshot, it keeps every such claim. A
// *Snapshot is immutable and safe for concurrent use.
type Snapshot struct {
	at   time.Time
	pods map[nsName]Pod
	uids map[string]nsName
	sets map[nsName]StatefulSet
}

type nsName struct{ ns, name string }

// NewSnapshot returns the snapshot of pods and sets listed at time at. The
// lists must be complete: a pod missing from pods counts as deleted, and a
// StatefulSet missing from sets makes its pods invalid members. It reports
// every problem at once: a pod without a name or UID, an unknown phase, a
// negative grace period, a StatefulSet without a name or with negative
// replicas or start, and duplicates.
func NewSnapshot(at time.Time, pods []Pod, sets []StatefulSet) (*Snapshot, error) {
	fe := fieldErrors{object: "gc snapshot"}
	s := &Snapshot{
		at:   at,
		pods: make(map[nsName]Pod, len(pods)),
		uids: make(map[string]nsName, len(pods)),
		sets: make(map[nsName]StatefulSet, len(sets)),
	}
	for i := range pods {
		p := &pods[i]
		path := fmt.Sprintf("pods[%d]", i)
		if p.Name == "" {
			fe.add(path+".name", "", "required")
		}
		if p.UID == "" {
			fe.add(path+".uid", "", "required")
		}
		switch p.Phase {
		case "", PodPending, PodRunning, PodSucceeded, PodFailed, PodUnknown:
		default:
			fe.add(path+".phase", string(p.Phase), "not a pod phase (Pending, Running, Succeeded, Failed, Unknown)")
		}
		if p.DeletionGracePeriod < 0 {
			fe.add(path+".deletionGracePeriod", p.DeletionGracePeriod.String(), "negative")
		}
		if p.TerminationGracePeriod < 0 {
			fe.add(path+".terminationGracePeriod", p.TerminationGracePeriod.String(), "negative")
		}
		k := nsName{p.Namespace, p.Name}
		if _, dup := s.pods[k]; dup && p.Name != "" {
			fe.add(path, p.Namespace+"/"+p.Name, "duplicate pod")
		}
		if _, dup := s.uids[p.UID]; dup && p.UID != "" {
			fe.add(path+".uid", p.UID, "duplicate pod uid")
		}
		s.pods[k] = *p
		s.uids[p.UID] = k
	}
	for i := range sets {
		st := &sets[i]
		path := fmt.Sprintf("statefulSets[%d]", i)
		if st.Name == "" {
			fe.add(path+".name", "", "required")
		}
		if st.Replicas < 0 {
			fe.add(path+".replicas", strconv.Itoa(st.Replicas), "negative")
		}
		if st.OrdinalsStart < 0 {
			fe.add(path+".ordinalsStart", strconv.Itoa(st.OrdinalsStart), "negative")
		}
		k := nsName{st.Namespace, st.Name}
		if _, dup := s.sets[k]; dup && st.Name != "" {
			fe.add(path, st.String(), "duplicate StatefulSet")
		}
		s.sets[k] = *st
	}
	if err := fe.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// Time returns when the snapshot's lists were taken.
func (s *Snapshot) Time() time.Time { return s.at }

// Pod returns the pod namespace/name, if the snapshot has it.
func (s *Snapshot) Pod(namespace, name string) (Pod, bool) {
	p, ok := s.pods[nsName{namespace, name}]
	return p, ok
}

// StatefulSet returns the StatefulSet namespace/name, if the snapshot has it.
func (s *Snapshot) StatefulSet(namespace, name string) (StatefulSet, bool) {
	st, ok := s.sets[nsName{namespace, name}]
	return st, ok
}

// podOf returns the pod a claim's owner names: by namespace and name, or by
// UID when the owner records no name.
func (s *Snapshot) podOf(o store.Owner) (Pod, bool) {
	if o.Name != "" {
		return s.Pod(o.Namespace, o.Name)
	}
	k, ok := s.uids[o.UID]
	if !ok {
		return Pod{}, false
	}
	return s.pods[k], true
}

// membership is whether a pod name is a valid StatefulSet member, with the
// facts that decided it as a sentence fragment.
type membership struct {
	valid bool
	// named reports whether the name has the form <set>-<ordinal> and a
	// StatefulSet of that name exists.
	named bool
	why   string
}

// member applies Spiderpool's validity rule to pod namespace/name: the name
// must be <set>-<ordinal> (the regular expression ^(.*)-([0-9]+)$), the
// StatefulSet <set> must exist in the namespace, and the ordinal must lie in
// [start, start+replicas-1].
func (s *Snapshot) member(namespace, name string) membership {
	i := strings.LastIndexByte(name, '-')
	digits := name[i+1:]
	if i < 0 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return membership{why: fmt.Sprintf("name %q carries no StatefulSet ordinal", name)}
	}
	set := name[:i]
	ord, err := strconv.Atoi(digits)
	if err != nil {
		return membership{why: fmt.Sprintf("ordinal %s of %q is out of range", digits, name)}
	}
	st, ok := s.StatefulSet(namespace, set)
	if !ok {
		return membership{why: fmt.Sprintf("no StatefulSet %s/%s exists", namespace, set)}
	}
	m := membership{named: true}
	if st.Replicas == 0 {
		m.why = fmt.Sprintf("StatefulSet %s has 0 replicas", st.String())
		return m
	}
	last := st.OrdinalsStart + st.Replicas - 1
	m.valid = st.OrdinalsStart <= ord && ord <= last
	in := "outside"
	if m.valid {
		in = "within"
	}
	m.why = fmt.Sprintf("ordinal %d is %s StatefulSet %s's ordinals %d-%d", ord, in, st.String(), st.OrdinalsStart, last)
	return m
}

// Options tune garbage collection. Spiderpool's flags that default to true
// appear here negated, so that the zero Options is Spiderpool's default
// behaviour (with no additional delay).
//
// The zero Options is ready to use. A Options is a plain value.
type Options struct {
	// AdditionalGraceDelay is waited on top of each deadline
	// (SPIDERPOOL_GC_ADDITIONAL_GRACE_DELAY; Spiderpool's Helm chart sets 0,
	// its docs mention 5s).
	AdditionalGraceDelay time.Duration
	// DisableTerminatingOnReadyNode keeps the claims of stateless pods that
	// are terminating or finished on a Ready node, past any deadline, until
	// the pod object is gone (the inverse of
	// SPIDERPOOL_GC_STATELESS_TERMINATING_POD_ON_READY_NODE_ENABLED).
	DisableTerminatingOnReadyNode bool
	// DisableTerminatingOnNotReadyNode is the same for pods on a node that is
	// not Ready (the inverse of
	// SPIDERPOOL_GC_STATELESS_TERMINATING_POD_ON_NOT_READY_NODE_ENABLED). Set
	// it when a node cut off from the API server may still run its pods:
	// releasing their addresses would hand them out twice.
	DisableTerminatingOnNotReadyNode bool
	// ReleaseRunningWithoutIPs releases the claims of stateless Running or
	// Unknown pods whose status.podIPs is empty
	// (SPIDERPOOL_GC_ENABLE_STATELESS_RUNNING_POD_ON_EMPTY_POD_STATUS_IPS).
	ReleaseRunningWithoutIPs bool
	// DisableStatefulSet treats StatefulSet pods as stateless: no address is
	// kept for a member across restarts (Spiderpool's enableStatefulSet:
	// false).
	DisableStatefulSet bool
	// ClockSkew widens the window in which a claim counts as made after the
	// snapshot (and is therefore kept): a claim recorded less than ClockSkew
	// before the snapshot's time is kept too. Set it to the largest
	// difference expected between the clocks that stamp claims and the one
	// that stamps snapshots.
	ClockSkew time.Duration
}

// Validate reports whether the options make sense: no negative durations.
func (o Options) Validate() error {
	fe := fieldErrors{object: "gc options"}
	if o.AdditionalGraceDelay < 0 {
		fe.add("AdditionalGraceDelay", o.AdditionalGraceDelay.String(), "negative")
	}
	if o.ClockSkew < 0 {
		fe.add("ClockSkew", o.ClockSkew.String(), "negative")
	}
	return fe.err()
}

// Reason is the machine-readable cause of a Decision.
type Reason string

// Reasons to release a claim.
const (
	// ReleasePodGone: no pod of the claim's namespace and name (or UID)
	// exists, and the name is not a valid StatefulSet member.
	ReleasePodGone Reason = "pod-gone"
	// ReleaseUIDMismatch: a pod of that name exists with another UID, so
	// the claim's pod is gone; for a StatefulSet pod, the new pod either
	// already has its addresses or is not a valid member.
	ReleaseUIDMismatch Reason = "uid-mismatch"
	// ReleaseTerminating: the pod is terminating and
	// DeletionTimestamp + AdditionalGraceDelay has passed.
	ReleaseTerminating Reason = "terminating-expired"
	// ReleaseTerminatingWithoutIPs: the pod is terminating, its deadline
	// has not passed, but it reports no addresses any more.
	ReleaseTerminatingWithoutIPs Reason = "terminating-without-ips"
	// ReleaseFinished: a stateless pod Succeeded or Failed and
	// FinishedAt + TerminationGracePeriod + AdditionalGraceDelay has passed.
	ReleaseFinished Reason = "finished-expired"
	// ReleaseStatefulSetInvalid: a StatefulSet pod that is no longer a
	// valid member has finished, or runs without addresses.
	ReleaseStatefulSetInvalid Reason = "statefulset-invalid"
	// ReleaseRunningWithoutIPs: a stateless Running or Unknown pod reports
	// no addresses, and ReleaseRunningWithoutIPs is set.
	ReleaseRunningWithoutIPs Reason = "running-without-ips"
)

// Reasons to keep a claim.
const (
	// KeepNotPodOwned: the claim's owner has no pod UID (a host-local
	// container-ID claim); pod garbage collection does not judge it.
	KeepNotPodOwned Reason = "not-pod-owned"
	// KeepNoSnapshot: Decide was given a nil snapshot.
	KeepNoSnapshot Reason = "no-snapshot"
	// KeepClaimedAfterSnapshot: the claim is not older than the snapshot
	// (less ClockSkew), so its pod may simply be missing from it.
	KeepClaimedAfterSnapshot Reason = "claimed-after-snapshot"
	// KeepStatefulSetMember: the pod, gone, finished, terminating or
	// running without addresses, is a valid StatefulSet member whose next
	// incarnation reuses the claim.
	KeepStatefulSetMember Reason = "statefulset-member"
	// KeepStatefulSetReuse: a pod of the name exists with another UID, is a
	// valid StatefulSet member and has no addresses yet: it is about to take
	// the claim over.
	KeepStatefulSetReuse Reason = "statefulset-reuse"
	// KeepHostNetwork: the claim's pod uses the host's network.
	KeepHostNetwork Reason = "host-network"
	// KeepPending: the pod is Pending (or reports no phase), even if
	// terminating.
	KeepPending Reason = "pending"
	// KeepRunning: the pod is Running or Unknown, not terminating, and
	// reports addresses.
	KeepRunning Reason = "running"
	// KeepRunningWithoutIPs: a stateless Running or Unknown pod reports no
	// addresses, but ReleaseRunningWithoutIPs is not set.
	KeepRunningWithoutIPs Reason = "running-without-ips-kept"
	// KeepTerminating: the pod is terminating, its deadline has not passed
	// and it still reports addresses.
	KeepTerminating Reason = "terminating"
	// KeepFinished: a stateless pod finished, and its deadline has not
	// passed.
	KeepFinished Reason = "finished"
	// KeepFinishedTimeUnknown: a stateless pod finished, is not
	// terminating, and its FinishedAt is unknown, so no deadline can be set.
	KeepFinishedTimeUnknown Reason = "finished-time-unknown"
	// KeepReadyNode: a release is due, but the pod's node is Ready and
	// DisableTerminatingOnReadyNode is set.
	KeepReadyNode Reason = "ready-node-disabled"
	// KeepNotReadyNode: a release is due, but the pod's node is not Ready
	// and DisableTerminatingOnNotReadyNode is set.
	KeepNotReadyNode Reason = "not-ready-node-disabled"
)

// Decision is the verdict on one claim.
//
// The zero Decision keeps the zero claim for no reason. A Decision is a
// plain value and safe to copy.
type Decision struct {
	// Claim is the claim judged, as it was inspected.
	Claim store.Claim
	// Release reports whether the claim should be released.
	Release bool
	// Reason is why, for programs.
	Reason Reason
	// Message is why, for people: the pod, its state and the times that
	// decided.
	Message string
	// Applied reports whether Collect released the claim. Decide
	// leaves it false.
	Applied bool
	// Err is why Collect could not release the claim: an error
	// wrapping ErrConflict or ErrNotFound when the claim changed or went
	// since it was inspected (nothing to do), or another error. Nil for
	// claims kept and for Decide.
	Err error
}

// Decide judges every claim against the snapshot at time now, and returns
// one decision per claim, in the order of claims. It reads no clock and
// touches no store. Negative durations in opts count as zero (Collect
// rejects them).
//
// The rules, in the order they are tried (a pod is "valid" when it is a valid
// member of its StatefulSet: its name is <set>-<ordinal>, the StatefulSet
// exists, and the ordinal lies in [OrdinalsStart, OrdinalsStart+Replicas-1];
// "stateless" covers every pod not controlled by a StatefulSet, and every pod
// when DisableStatefulSet is set):
//
//  1. A claim whose owner has no UID is not a pod's: keep.
//  2. A nil snapshot: keep everything.
//  3. A claim recorded at or after the snapshot's time, less ClockSkew: keep
//     (its pod may have been created after the snapshot).
//  4. No pod of that namespace and name: keep if the name is a valid member
//     (the pod is being recreated), else release. The snapshot cannot say
//     what controlled a deleted pod, so the name decides: a deleted
//     stateless pod named like a valid member of an existing StatefulSet
//     keeps its claim too. Released at once: a snapshot does not say when
//     the pod went.
//  5. The pod has another UID than the claim's owner: the claim's pod is
//     gone and a new one took the name. Stateless: release. StatefulSet:
//     keep if valid and the new pod has no addresses yet (it will take the
//     claim over); release if it already has addresses (it got them
//     elsewhere) or is not valid.
//  6. HostNetwork: keep.
//  7. Succeeded or Failed. StatefulSet: keep if valid, release if not.
//     Stateless: release from FinishedAt + TerminationGracePeriod +
//     AdditionalGraceDelay on, subject to the node flags; with FinishedAt
//     unknown, the terminating rule decides if the pod is terminating, and
//     otherwise the claim is kept.
//  8. Pending (or no phase): keep, even if terminating.
//  9. Terminating. Valid StatefulSet member: keep. Otherwise the deadline is
//     DeletionTimestamp + AdditionalGraceDelay: from then on release; before
//     it, release only if the pod reports no addresses. Either release is
//     subject to the node flags.
//  10. Running or Unknown with addresses: keep.
//  11. Running or Unknown without addresses. StatefulSet: keep if valid,
//     release if not. Stateless: release only with ReleaseRunningWithoutIPs.
//
// The node flags: a release under rule 7 or 9 becomes a keep when the pod's
// node is Ready and DisableTerminatingOnReadyNode is set, or not Ready and
// DisableTerminatingOnNotReadyNode is set.
//
// Deadlines are inclusive: at exactly the deadline the claim is released.
//
// Where this differs from Spiderpool v1.2.1:
//
//   - The terminating deadline is DeletionTimestamp + AdditionalGraceDelay.
//     Spiderpool adds deletionGracePeriodSeconds once more, in both its
//     tracing path and its scan of all pools, although Kubernetes already set
//     deletionTimestamp to the delete request's time plus that grace period;
//     its effective wait is twice the grace period plus the delay. Here a
//     claim is released one grace period earlier than Spiderpool would
//     release it; set AdditionalGraceDelay to the pods' usual grace period to
//     wait as long as Spiderpool does.
//   - Before the terminating deadline, Spiderpool's scan releases a pod
//     without addresses at once, checking neither the node flags nor
//     StatefulSet validity; here both are checked (rule 9).
//   - Spiderpool's tracing path releases Pending pods once terminating past
//     the deadline, and its scan keeps them; here they are kept (rule 8).
//   - Spiderpool's scan releases an Unknown stateless pod without addresses;
//     its tracing path does not; here it is Running's rule (rule 11).
//   - A stateless finished pod is judged by the tracing path's deadline
//     (rule 7), not the scan's (which applies the terminating rule to a
//     finished pod only once it is terminating).
//   - Rule 3 has no counterpart: Spiderpool reads the pod of each record
//     when it scans it.
func Decide(claims []store.Claim, snap *Snapshot, now time.Time, opts Options) []Decision {
	opts.AdditionalGraceDelay = max(opts.AdditionalGraceDelay, 0)
	opts.ClockSkew = max(opts.ClockSkew, 0)
	out := make([]Decision, len(claims))
	for i, c := range claims {
		j := judge{d: &out[i], snap: snap, now: now, opts: &opts}
		j.d.Claim = c
		j.decide()
	}
	return out
}

// judge decides one claim.
type judge struct {
	d    *Decision
	snap *Snapshot
	now  time.Time
	opts *Options
}

func (j *judge) keep(r Reason, format string, args ...any) {
	j.d.Release, j.d.Reason, j.d.Message = false, r, fmt.Sprintf(format, args...)
}

func (j *judge) release(r Reason, format string, args ...any) {
	j.d.Release, j.d.Reason, j.d.Message = true, r, fmt.Sprintf(format, args...)
}

// stamp formats a time for messages.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (j *judge) decide() {
	c := j.d.Claim
	if c.Owner.UID == "" {
		j.keep(KeepNotPodOwned, "%s is held by %s, which names no pod UID: pod garbage collection does not judge it", c.Key(), c.Owner)
		return
	}
	s := j.snap
	if s == nil {
		j.keep(KeepNoSnapshot, "no snapshot of the cluster was given, so nothing is known about %s", c.Owner)
		return
	}
	if since := s.at.Add(-j.opts.ClockSkew); !c.Time.IsZero() && !c.Time.Before(since) {
		j.keep(KeepClaimedAfterSnapshot, "%s was claimed by %s at %s, not before the snapshot of %s less clock skew %v: its pod may be newer than the snapshot",
			c.Key(), c.Owner, stamp(c.Time), stamp(s.at), j.opts.ClockSkew)
		return
	}
	p, ok := s.podOf(c.Owner)
	if !ok {
		j.gone()
		return
	}
	sts := p.ControllerKind == KindStatefulSet && !j.opts.DisableStatefulSet
	var m membership
	if sts {
		m = s.member(p.Namespace, p.Name)
	}
	if p.UID != c.Owner.UID {
		j.uidMismatch(&p, sts, m)
		return
	}
	if p.HostNetwork {
		j.keep(KeepHostNetwork, "pod %s uses the host network: garbage collection ignores it", &p)
		return
	}
	switch p.Phase {
	case PodSucceeded, PodFailed:
		if sts {
			if m.valid {
				j.keep(KeepStatefulSetMember, "StatefulSet pod %s is %s, but %s: its restarted pod will reuse %s", &p, p.Phase, m.why, c.Key())
			} else {
				j.release(ReleaseStatefulSetInvalid, "StatefulSet pod %s is %s and no longer a valid member: %s", &p, p.Phase, m.why)
			}
			return
		}
		j.finished(&p)
		return
	case PodPending, "":
		j.keep(KeepPending, "pod %s is Pending: it may be setting up the address", &p)
		return
	}
	if !p.DeletionTimestamp.IsZero() {
		if sts && m.valid {
			j.keep(KeepStatefulSetMember, "StatefulSet pod %s is terminating, but %s: its restarted pod will reuse %s", &p, m.why, c.Key())
			return
		}
		j.terminating(&p)
		return
	}
	if p.HasIPs {
		j.keep(KeepRunning, "pod %s is %s and reports its addresses", &p, p.Phase)
		return
	}
	switch {
	case sts && m.valid:
		j.keep(KeepStatefulSetMember, "StatefulSet pod %s is %s without addresses, but %s", &p, p.Phase, m.why)
	case sts:
		j.release(ReleaseStatefulSetInvalid, "StatefulSet pod %s is %s without addresses and no longer a valid member: %s", &p, p.Phase, m.why)
	case j.opts.ReleaseRunningWithoutIPs:
		j.release(ReleaseRunningWithoutIPs, "pod %s is %s but reports no addresses, and such pods' claims are released", &p, p.Phase)
	default:
		j.keep(KeepRunningWithoutIPs, "pod %s is %s and reports no addresses, but such pods' claims are kept unless ReleaseRunningWithoutIPs is set", &p, p.Phase)
	}
}

// gone decides a claim whose pod is not in the snapshot.
func (j *judge) gone() {
	o := j.d.Claim.Owner
	if o.Name == "" {
		j.release(ReleasePodGone, "no pod with uid %s exists", o.UID)
		return
	}
	who := fmt.Sprintf("%s/%s (uid %s)", o.Namespace, o.Name, o.UID)
	if j.opts.DisableStatefulSet {
		j.release(ReleasePodGone, "pod %s no longer exists", who)
		return
	}
	m := j.snap.member(o.Namespace, o.Name)
	switch {
	case m.valid:
		j.keep(KeepStatefulSetMember, "pod %s no longer exists, but %s: its recreated pod will reuse %s", who, m.why, j.d.Claim.Key())
	case m.named:
		j.release(ReleasePodGone, "pod %s no longer exists and %s", who, m.why)
	default:
		j.release(ReleasePodGone, "pod %s no longer exists", who)
	}
}

// uidMismatch decides a claim whose pod's name now belongs to another pod.
func (j *judge) uidMismatch(p *Pod, sts bool, m membership) {
	o := j.d.Claim.Owner
	switch {
	case !sts:
		j.release(ReleaseUIDMismatch, "pod %s/%s now has uid %s, not the claim's %s: the claim's pod is gone", p.Namespace, p.Name, p.UID, o.UID)
	case !m.valid:
		j.release(ReleaseUIDMismatch, "StatefulSet pod %s/%s now has uid %s, not the claim's %s, and is no longer a valid member: %s", p.Namespace, p.Name, p.UID, o.UID, m.why)
	case p.HasIPs:
		j.release(ReleaseUIDMismatch, "StatefulSet pod %s/%s now has uid %s, not the claim's %s, and already reports addresses without this claim", p.Namespace, p.Name, p.UID, o.UID)
	default:
		j.keep(KeepStatefulSetReuse, "StatefulSet pod %s/%s was recreated as uid %s (the claim has %s), reports no addresses yet and %s: it will take %s over",
			p.Namespace, p.Name, p.UID, o.UID, m.why, j.d.Claim.Key())
	}
}

// finished decides a stateless Succeeded or Failed pod.
func (j *judge) finished(p *Pod) {
	if p.FinishedAt.IsZero() {
		if !p.DeletionTimestamp.IsZero() {
			j.terminating(p)
			return
		}
		j.keep(KeepFinishedTimeUnknown, "pod %s is %s, but when its containers finished is unknown", p, p.Phase)
		return
	}
	deadline := p.FinishedAt.Add(p.TerminationGracePeriod + j.opts.AdditionalGraceDelay)
	facts := fmt.Sprintf("pod %s is %s since %s; releasable from %s (termination grace %v, additional delay %v); now %s",
		p, p.Phase, stamp(p.FinishedAt), stamp(deadline), p.TerminationGracePeriod, j.opts.AdditionalGraceDelay, stamp(j.now))
	if j.now.Before(deadline) {
		j.keep(KeepFinished, "%s", facts)
		return
	}
	if j.nodeBlocks(p, facts) {
		return
	}
	j.release(ReleaseFinished, "%s", facts)
}

// terminating decides a pod with a deletion timestamp that no other rule
// keeps.
func (j *judge) terminating(p *Pod) {
	deadline := p.DeletionTimestamp.Add(j.opts.AdditionalGraceDelay)
	facts := fmt.Sprintf("pod %s is terminating (deletion timestamp %s, grace %v); releasable from %s (additional delay %v); now %s",
		p, stamp(p.DeletionTimestamp), p.DeletionGracePeriod, stamp(deadline), j.opts.AdditionalGraceDelay, stamp(j.now))
	due := !j.now.Before(deadline)
	if !due && p.HasIPs {
		j.keep(KeepTerminating, "%s", facts)
		return
	}
	if j.nodeBlocks(p, facts) {
		return
	}
	if due {
		j.release(ReleaseTerminating, "%s", facts)
	} else {
		j.release(ReleaseTerminatingWithoutIPs, "%s, but it reports no addresses any more", facts)
	}
}

// nodeBlocks keeps a claim whose release the node flags forbid, and reports
// whether it did.
func (j *judge) nodeBlocks(p *Pod, facts string) bool {
	switch {
	case p.NodeReady && j.opts.DisableTerminatingOnReadyNode:
		j.keep(KeepReadyNode, "%s, but its node is Ready and such pods' claims are kept", facts)
	case !p.NodeReady && j.opts.DisableTerminatingOnNotReadyNode:
		j.keep(KeepNotReadyNode, "%s, but its node is not Ready and such pods' claims are kept", facts)
	default:
		return false
	}
	return true
}

// Collect lists every claim, judges it with Decide against snap at
// time now, and releases the claims judged releasable, each only at the
// revision it was inspected at (ReleaseClaim). It returns every decision, in
// the order of Claims, with Applied set on the releases done.
//
// A claim that changed or went since it was listed (a StatefulSet pod's new
// incarnation took it over, CNI DEL released it) is not released: its
// decision carries an Err wrapping ErrConflict or ErrNotFound, and collection
// carries on. Other errors are recorded on their decisions too, and returned
// joined, with all decisions. If ctx ends, the releases not yet tried carry
// ctx's error, which is returned.
//
// snap must have been taken before Collect is called: the claims are
// listed after it, so that a claim made after the snapshot is recognised by
// its time (Decide's rule 3).
func Collect(ctx context.Context, a *ipam.Allocator, snap *Snapshot, now time.Time, opts Options) ([]Decision, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, &ipam.FieldError{Object: "garbage collection", Field: "snapshot", Reason: "required"}
	}
	claims, err := a.Claims(ctx)
	if err != nil {
		return nil, err
	}
	ds := Decide(claims, snap, now, opts)
	var errs []error
	for i := range ds {
		d := &ds[i]
		if !d.Release {
			continue
		}
		if err := ctx.Err(); err != nil {
			d.Err = err
			if len(errs) == 0 || !errors.Is(errs[len(errs)-1], err) {
				errs = append(errs, err)
			}
			continue
		}
		err := a.ReleaseClaimAt(ctx, d.Claim, now)
		switch {
		case err == nil:
			d.Applied = true
		case errors.Is(err, ipam.ErrConflict), errors.Is(err, ipam.ErrNotFound), errors.Is(err, store.ErrNotFound):
			d.Err = err
		default:
			d.Err = err
			errs = append(errs, err)
		}
	}
	return ds, errors.Join(errs...)
}
