// Package kubeusage shows pool usage where Spiderpool users look for it on a
// live cluster: the count columns of `kubectl get spiderippool` and
// `kubectl get spidersubnet` (status.allocatedIPCount and
// status.totalIPCount), and a Warning Event, reason EventNearlyExhausted, on
// a SpiderIPPool whose free addresses fall below a threshold.
//
// # Counts, debounced
//
// A Writer computes every pool's usage (Allocator.Usage: the pool's
// capacity less excludeIPs and gateways, and its claims counted by the
// Store) once per Options.Interval, and writes a SpiderIPPool's two counts
// through its status subresource (a merge patch of status.allocatedIPCount
// and status.totalIPCount) only when one of them differs from what the
// informer's cache shows. So a pool's status is written at most once per
// interval however many addresses are claimed and released in it, and not
// at all while its counts stay put. Only the counts are written: not
// Spiderpool's status.allocatedIPs, the map of every address to its pod that
// its agents rewrite on each allocation (the hot object the library's Store
// of one object per claim avoids).
//
// A SpiderSubnet's counts are those of subnet.StatusOf, as Spiderpool
// defines them: totalIPCount the subnet's ips less excludeIPs,
// allocatedIPCount the addresses handed to its pools (not the addresses
// pods use); Options.Subnets gives them (kubesubnet.Runner.Status).
// Spiderpool's status.controlledIPPools map is not written.
//
// totalIPCount of a SpiderIPPool is ipam.Usage.Capacity: its ips less its
// excludeIPs, as Spiderpool counts it, and less its gateway, which
// Spiderpool's webhook refuses in ips unless excluded, so the two agree on
// every pool Spiderpool accepts. Reserved addresses (SpiderReservedIP) are
// counted, as in Spiderpool.
//
// # Nearly exhausted
//
// A pool is nearly exhausted when its free addresses are fewer than
// Options.LowFreePercent (default 10) per cent of the addresses it can hand
// out (capacity less reserved), the threshold of the IpamkitPoolNearlyExhausted
// alert of the metrics module and of Whereabouts' "pool more than 90 %
// full"; or, with Options.LowFreeAddresses set, fewer than that many. The
// Event is recorded once when a pool crosses the threshold, not at each
// pass or allocation after; it is recorded again only after the pool has
// recovered, its free addresses back at one and a half times the threshold
// (at least one address above it), so a pool that hovers at the threshold
// does not flood its Events. A pool that can hand out nothing (every address
// reserved) is never nearly exhausted, as the alert never fires for it. The
// state is the Writer's own: a new Writer (a restart, another leader)
// records the Event again for a pool that is below the threshold when it
// starts.
//
// # Cost
//
// Each pass reads every pool's count from the Store (Allocator.Usage) and
// writes only what changed. A kubestore.Store has no count of its own
// (store.Counter) but pages through every claim (store.ClaimPager), so a
// pass counts every pool's IPClaims in one paged list of every IPClaim
// (500 a request), not a label-selector list per pool, each of which would
// cost the API server every IPClaim of the cluster: at 150,000 claims a
// pass is 300 list requests, whatever the number of pools. Its cost still
// grows with the cluster's claims: lengthen Options.Interval on clusters of
// hundreds of thousands. Run it on one replica (cmd/ipam-controller runs
// it under its leader, and serves its usage gauges from a reading at most
// one interval old).
package kubeusage
