package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipamkit/ipam/store"
)

// Watch calls h.Reset with every claim under the Store's prefix, read in
// pages at one revision as List reads a pool, then h.Apply with each change
// to a claim after that revision, in the order of etcd's history, until ctx
// is done; it then returns ctx's error.
//
// When the stream breaks (a member stops, loses its leader or the connection
// drops), Watch resumes it from the revision after the last change it
// applied, on any member, so the handler misses nothing and is not reset.
// When that revision has been compacted away, it lists every claim again and
// calls h.Reset. While the cluster cannot be reached it tries again, with a
// back-off of up to two seconds, for as long as ctx lasts. Records it cannot
// read are left out of the lists and the changes, and logged.
func (s *Store) Watch(ctx context.Context, h store.WatchHandler) error {
	prefix := s.keys.claimsPrefix()
	var rev int64 // the revision the handler is at; 0: it needs a Reset
	var wait time.Duration
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		wait = min(max(2*wait, 50*time.Millisecond), 2*time.Second)
		if rev == 0 {
			claims, at, err := s.list(ctx, prefix)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil && !errors.Is(err, ErrCorrupt) {
				s.log.Warn("etcdstore: watch: cannot list claims", "prefix", prefix, "err", err)
				continue
			}
			if err != nil {
				s.log.Warn("etcdstore: watch: unreadable claims left out", "err", err)
			}
			h.Reset(claims)
			rev = at
		}
		var err error
		rev, err = s.follow(ctx, h, prefix, rev)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case isCompacted(err):
			s.log.Warn("etcdstore: watch: history compacted, listing again", "err", err)
			rev, wait = 0, 0
		case err != nil:
			s.log.Warn("etcdstore: watch: stream broke, resuming", "revision", rev+1, "err", err)
		default:
			wait = 0
		}
	}
}

// follow watches the keys under prefix from revision rev+1 and applies each
// change to h until the stream ends, and returns the revision h is then at,
// with the error that ended the stream.
func (s *Store) follow(ctx context.Context, h store.WatchHandler, prefix string, rev int64) (int64, error) {
	// Without a leader, a member's stream would go quiet rather than end:
	// WithRequireLeader makes it end, so that Watch moves to another member.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.cli.Watch(wctx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithRev(rev+1),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return rev, err
		}
		if resp.IsProgressNotify() {
			// Every change up to the header's revision has been sent.
			rev = max(rev, resp.Header.Revision)
			continue
		}
		for _, ev := range resp.Events {
			if e, ok := s.event(ev); ok {
				h.Apply(e)
			}
			rev = ev.Kv.ModRevision
		}
	}
	return rev, errors.New("watch stream closed")
}

// event turns an etcd event on a claim key into a store.Event, and reports
// false for a write of a record it cannot read (logged): the handler keeps
// what it knew of that address, a hint that a Create corrects.
func (s *Store) event(ev *clientv3.Event) (store.Event, bool) {
	if ev.Type == mvccpb.DELETE {
		if ev.PrevKv != nil {
			if c, err := s.decodeClaimKV(ev.PrevKv); err == nil {
				return store.Event{Claim: c, Deleted: true}, true
			}
		}
		pool, ip, err := s.keys.parseClaimKey(string(ev.Kv.Key))
		return store.Event{Claim: store.Claim{Pool: pool, IP: ip}, Deleted: true}, err == nil
	}
	c, err := s.decodeClaimKV(ev.Kv)
	if err != nil {
		s.log.Warn("etcdstore: watch: unreadable claim left out", "err", err)
		return store.Event{}, false
	}
	return store.Event{Claim: c}, true
}

// isCompacted reports whether err says that the revision asked for has been
// compacted away.
func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted)
}
