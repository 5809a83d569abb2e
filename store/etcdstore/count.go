package etcdstore

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Count returns the number of claims of pool (store.Counter): a count-only
// range over the pool's claim keys, answered by etcd without sending a key
// or a value, unreadable keys included.
func (s *Store) Count(ctx context.Context, pool string) (int, error) {
	prefix := s.keys.poolPrefix(pool)
	resp, err := s.get(ctx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: count %s (keys %q): %w", pool, prefix, err)
	}
	return int(resp.Count), nil
}
