package store

import "context"

// ClaimPager is an optional Store capability: every claim of every pool, in
// pages, so that a pass over all of them holds one page at a time rather
// than every claim of the Store, and costs the backend one read per page
// rather than one per pool. Garbage collection (kubegc's Options.Claims)
// pages through the claims with it, and Allocator.Usage counts every
// pool's claims in one pass with it where the Store is no Counter. A
// *kubestore.Store is one: its ClaimPages pages through the cluster's
// IPClaims, one list request per page.
type ClaimPager interface {
	// ClaimPages calls page with every claim, in pages of at most size
	// claims, in no particular order, each as it was at some point after
	// the call began (a *kubestore.Store: all at one point, unless the
	// listing outlives the API server's history), and stops at the first
	// error page returns, which it returns. page must not keep the slice
	// it is given after it returns. Records that are no valid claims are
	// left out and reported in the error returned at the end, after every
	// page (wrapping ErrCorrupt); any other error stops the listing.
	ClaimPages(ctx context.Context, size int, page func([]Claim) error) error
}
