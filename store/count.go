package store

import (
	"context"
	"fmt"
)

// Counter is an optional Store capability: the number of claims of a pool,
// without reading them. Usage figures (Allocator.PoolUsage, a metrics
// collector at every scrape) ask it instead of listing the pool.
type Counter interface {
	// Count returns the number of claims of pool: the records List reads
	// and those it reports unreadable (ErrCorrupt), whose addresses are
	// taken all the same. It is as current as List. An unknown pool has
	// none.
	Count(ctx context.Context, pool string) (int, error)
}

// Count returns the number of claims of pool in s: s.Count if s is a
// Counter, else the length of s.List. A List that reports unreadable
// records returns the number it could read with its error (wrapping
// ErrCorrupt): the true number is higher.
func Count(ctx context.Context, s Store, pool string) (int, error) {
	if c, ok := s.(Counter); ok {
		return c.Count(ctx, pool)
	}
	claims, err := s.List(ctx, pool)
	if err != nil {
		return len(claims), fmt.Errorf("counting the claims of pool %q: %w", pool, err)
	}
	return len(claims), nil
}
