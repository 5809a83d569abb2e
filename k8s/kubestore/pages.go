package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipamkit/ipam/store"
)

// listPage is the page size of the Store's own lists of every IPClaim
// (Watch, Migrate and the layout check): kubectl's.
const listPage = 500

// ClaimPages calls page with every claim of every pool, in pages of at
// most size claims, in no particular order, and stops at the first error
// page returns, which it returns. Each page is one list request with a
// limit and a continue token, decoded as it comes, so that a pass over
// 150,000 claims holds about one page of them (kubegc's Options.Claims:
// a *Store is a store.ClaimPager). The pages are served from one snapshot
// of the cluster, unless the listing outlives the API server's history
// (etcd compacts it after some 5 minutes): the continue token then
// expires, and the listing goes on from the next object at the newest
// revision, with the token of the server's 410 answer, so the claims after
// it are read later than the others, each as it was at some point after
// the call began. A claim carries its object's resourceVersion as
// Revision, as Get's does, and is remembered as Get's is, so that a Delete
// of it at that revision sends its UID as a precondition without a read
// first. The slice page is given is reused for the next page: page must
// not keep it.
//
// Objects that are no valid claims are left out, as List and ListAll leave
// them out, and reported at the end in an error wrapping store.ErrCorrupt
// (errors.Join of a *CorruptError for each); so are objects named the old
// way (LegacyClaimName), with a reason that names MigrateCommand: a Store
// of this version does not read them as claims until Migrate moves them.
// A claim whose labels disagree with it is given to page and reported. Any
// other error stops the listing: an error wrapping ErrUnavailable when the
// server gives no usable answer.
func (s *Store) ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error {
	if size <= 0 {
		return fmt.Errorf("kubestore: claim pages: size %d: must be positive", size)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: list every claim: %w", err)
	}
	var bad []error
	var stopped error
	claims := make([]store.Claim, 0, size)
	_, err := s.eachPage(ctx, size, func(items []json.RawMessage) bool {
		claims, bad = s.decodeClaims(items, nil, claims[:0], bad)
		stopped = page(claims)
		return stopped == nil
	})
	switch {
	case stopped != nil:
		return stopped
	case err != nil:
		return s.fail(ctx, "list", "every claim", "", err)
	}
	return errors.Join(bad...)
}

// decodeClaims appends to claims those of items that keep selects (nil:
// all), remembering each as seen, and to bad a *CorruptError for each item
// that is no valid claim or whose labels disagree with it.
func (s *Store) decodeClaims(items []json.RawMessage, keep func(store.Claim) bool, claims []store.Claim, bad []error) ([]store.Claim, []error) {
	for _, raw := range items {
		c, o, err := decodeClaim(raw)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if err := o.checkLabels(c); err != nil {
			bad = append(bad, err)
		}
		if keep == nil || keep(c) {
			s.seen.put(o.Metadata.Name, c, o)
			claims = append(claims, c)
		}
	}
	return claims, bad
}

// eachClaim calls f with every IPClaim, from a list in pages of listPage
// (see eachPage), until f returns false, and returns the resourceVersion
// of the list's first page.
func (s *Store) eachClaim(ctx context.Context, f func(json.RawMessage) bool) (string, error) {
	return s.eachPage(ctx, listPage, func(items []json.RawMessage) bool {
		for _, item := range items {
			if !f(item) {
				return false
			}
		}
		return true
	})
}

// eachPage lists every IPClaim in pages of at most size objects, one
// request each, and calls f with the objects of each page until f returns
// false; it returns the resourceVersion of the first page. When the
// continue token of a page expires (410 Expired: the first page's snapshot
// is compacted), it goes on with the token the server's answer carries,
// from the next object at the newest revision, so that a listing that
// outlives the history still ends. The returned resourceVersion is then
// compacted too: a watch from it gets 410, and Watch lists again.
func (s *Store) eachPage(ctx context.Context, size int, f func([]json.RawMessage) bool) (string, error) {
	var rv, cont string
	for {
		req := s.client.Get().Resource(ClaimResource).Param("limit", strconv.Itoa(size))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		raw, err := s.do(ctx, req)
		if next, ok := expired(err); ok && cont != "" && next != cont {
			cont = next
			continue
		}
		if err != nil {
			return "", err
		}
		list := &objectList{}
		if err := json.Unmarshal(raw, list); err != nil {
			return "", fmt.Errorf("decoding the list of %s: %w", ClaimResource, err)
		}
		if rv == "" {
			rv = list.Metadata.ResourceVersion
		}
		if !f(list.Items) {
			return rv, nil
		}
		if cont = list.Metadata.Continue; cont == "" {
			return rv, nil
		}
	}
}

// expired returns the continue token of a 410 answer to a list whose
// continue token has expired (which goes on at the newest revision), and
// whether err is one.
func expired(err error) (string, bool) {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusGone || se.ErrStatus.ListMeta.Continue == "" {
		return "", false
	}
	return se.ErrStatus.ListMeta.Continue, true
}
