//go:build linux

package filestore

import (
	"context"
	"errors"

	"github.com/ipamkit/ipam/store"
)

// Publishing modes, for tests that take each way of publishing a claim file.
const (
	PublishEmptyPath = publishEmptyPath
	PublishProc      = publishProc
	PublishTemp      = publishTemp
)

// SetPublishing makes s publish claim files in mode from now on.
func SetPublishing(s *Store, mode int) { s.publishing.Store(int32(mode)) }

// Publishing reports how s publishes claim files now.
func Publishing(s *Store) int { return int(s.publishing.Load()) }

// Steps are the steps of the writes at which SetHook's function is called,
// and StepRead the call made for every file read.
var (
	Steps    = steps
	StepRead = stepRead
)

// SetHook makes s call f at each step of its writes (see Steps) and at each
// file it reads (StepRead). Set it before s is used by other goroutines.
func SetHook(s *Store, f func(step string)) { s.hook = f }

// IndexDir returns the directory of s's owner index.
func IndexDir(s *Store) string { return s.idxDir }

// OwnedByScan is Owned as it was before the owner index: every claim of
// every pool listed and matched against q. Benchmarks compare it with Owned.
func OwnedByScan(ctx context.Context, s *Store, q store.OwnerQuery) ([]store.Claim, error) {
	var out []store.Claim
	var errs []error
	for _, p := range s.order {
		cs, err := s.List(ctx, p.Name)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				return nil, err
			}
			errs = append(errs, err)
		}
		for _, c := range cs {
			if q.Matches(c) {
				out = append(out, c)
			}
		}
	}
	return out, errors.Join(errs...)
}
