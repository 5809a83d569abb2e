package memstore

import (
	"context"
	"fmt"
)

// Count returns the number of claims of pool (store.Counter), kept as the
// pool changes: it reads no claim.
func (s *Store) Count(ctx context.Context, pool string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: count %s: %w", pool, err)
	}
	p := s.b.pool(pool)
	if p == nil {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, nil
}
