// Package gc is garbage collection of pod claims: Decide, a pure function
// that judges every claim against a snapshot of the cluster's pods and
// StatefulSets, and Collect, which applies its verdicts to an
// ipam.Allocator's claims through its Store. The rules follow Spiderpool's
// IP GC (its pod-tracing path and its periodic scan of every pool); where the
// two disagree, or where their arithmetic is off, the choice made here is
// spelled out at the rule, and always leans toward keeping an address a live
// pod might still use.
//
// The caller's duties: take the snapshot from a complete, synced view of the
// cluster (an informer that has not synced yet shows pods as gone), take it
// before listing claims (Collect lists them itself, after), and decide
// whether GC runs at all (Spiderpool's SPIDERPOOL_GC_IP_ENABLED is the
// caller's switch, not an option here).
//
// Use it:
//
//	snap, err := gc.NewSnapshot(time.Now(), pods, statefulSets) // a synced view
//	decisions, err := gc.Collect(ctx, alloc, snap, time.Now(), gc.Options{})
//
// or gc.Decide(claims, snap, now, opts) to judge without releasing anything.
// k8s/kubegc runs Collect from informers on a live cluster.
package gc
