package ipam

import (
	"cmp"
	"slices"
)

// This file orders the candidates that survive the filters, as Spiderpool
// does: a pool bound to more specific things is tried first.

// Bits of priorityRank, from the most significant: the order in which Spiderpool
// compares the "has field" booleans.
const (
	rankPodAffinity uint8 = 1 << (5 - iota)
	rankNodeName
	rankNodeAffinity
	rankNamespaceName
	rankNamespaceAffinity
	rankMultusName
)

// priorityRank returns the pool's priority as a number, higher first: one bit per
// selection field the pool sets, from the most significant, podAffinity,
// nodeName, nodeAffinity, namespaceName, namespaceAffinity, multusName. A
// field counts as set when it is a non-nil selector or a non-empty list, even
// if the filters would ignore it (nodeAffinity beside nodeName). A nil pool
// ranks 0. Comparing ranks is Spiderpool's lexicographic comparison of the six
// booleans.
func priorityRank(p *Pool) uint8 {
	if p == nil {
		return 0
	}
	var r uint8
	if p.PodAffinity != nil {
		r |= rankPodAffinity
	}
	if len(p.NodeName) > 0 {
		r |= rankNodeName
	}
	if p.NodeAffinity != nil {
		r |= rankNodeAffinity
	}
	if len(p.NamespaceName) > 0 {
		r |= rankNamespaceName
	}
	if p.NamespaceAffinity != nil {
		r |= rankNamespaceAffinity
	}
	if len(p.MultusName) > 0 {
		r |= rankMultusName
	}
	return r
}

// comparePriority returns a negative number when a is tried before b, a
// positive one when b is tried first, and 0 when they rank the same (see
// priorityRank): the first of podAffinity, nodeName, nodeAffinity, namespaceName,
// namespaceAffinity and multusName that one pool sets and the other does not
// decides, for the pool that sets it.
func comparePriority(a, b *Pool) int {
	return cmp.Compare(priorityRank(b), priorityRank(a))
}

// Sort orders pools by comparePriority, in place. Pools of equal rank keep
// their input order, the order they were named in. (Spiderpool's order among
// them is random, although its documentation promises written order: a
// deliberate difference.) Sort does not allocate.
func Sort(pools []*Pool) {
	slices.SortStableFunc(pools, comparePriority)
}
