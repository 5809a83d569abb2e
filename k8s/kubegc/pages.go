package kubegc

import (
	"context"

	"github.com/ipamkit/ipam/store"
)

// DefaultPageSize is the number of claims of a page when Options.PageSize
// is zero: the page size of kubectl's lists.
const DefaultPageSize = 500

// ClaimPager lists every claim of a Store in pages, so that a full pass
// holds one page of claims at a time rather than every claim of the
// cluster (see Options.Claims). A *kubestore.Store is one: its ClaimPages
// pages through the cluster's IPClaims, one list request per page.
type ClaimPager interface {
	// ClaimPages calls page with every claim, in pages of at most size
	// claims, in no particular order, each as it was at some point after
	// the call began (a *kubestore.Store: all at one point, unless the
	// listing outlives the API server's history), and stops at the first
	// error page returns. page must not keep the slice it is given after
	// it returns. Records that are no valid claims are left out and
	// reported in the error returned at the end (wrapping
	// store.ErrCorrupt); any other error stops the listing.
	ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error
}
