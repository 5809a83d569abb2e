//go:build linux

package filestore

import (
	"context"
	"fmt"
)

// Count returns the number of claims of pool (store.Counter): the files
// named by an address of the pool, corrupt ones included, counted from the
// directory's names alone without reading a file.
func (s *Store) Count(ctx context.Context, poolName string) (int, error) {
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("filestore: count %s: %w", poolName, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	p := s.pools[poolName]
	if p == nil {
		return 0, nil
	}
	if err := s.lock(ctx); err != nil {
		return fail(err)
	}
	defer s.unlock()
	n, seen := 0, 0
	err := s.walk(s.dir, func(name string) error {
		if seen++; seen%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if ip, _, ok := claimName(name); ok && p.contains(ip) {
			n++
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return n, nil
}
