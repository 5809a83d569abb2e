// Package storetest is a conformance suite for implementations of store.Store, in
// the manner of testing/fstest.TestFS: any Store, ours or a user's, runs it from
// its own tests and passes it before the allocator relies on it.
//
// # Usage
//
// An implementation provides a function that makes a fresh, empty backend and
// returns an Opener for it; each call of the Opener opens another, separate Store
// instance on that backend, as a second process or client would:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Opener {
//			s := memstore.New()
//			return func() store.Store { return s.Open() }
//		})
//	}
//
// A store backed by a server (etcd, Kubernetes, a database) would connect in
// newBackend, give each backend its own empty key prefix or namespace, register
// its teardown with t.Cleanup, and return an Opener that makes a new client.
//
// # What an implementation must provide
//
//   - newBackend is called once per check, from the check's own subtest, and must
//     return an Opener for a backend that holds no claims and no cursors.
//   - Every Store the Opener returns must see the writes made through every other
//     Store it returned: they are clients of one backend, and the suite races them
//     against each other. Returning the same instance each time passes, but tests
//     less than separate instances do.
//   - Stores must be safe for concurrent use by multiple goroutines.
//
// # What the suite checks
//
// Each check is a subtest of Run, named as below, on a fresh backend:
//
//   - CreateGet: Create returns the claim with a positive Revision and otherwise
//     as given; Get returns the same claim (pool, IP, every Owner field, Time and
//     Revision), for IPv4 and IPv6; Get of an absent address, or in an unknown
//     pool, fails with store.ErrNotFound; List of an unknown pool is empty.
//   - CreateExists: a second Create of a claimed address fails with
//     store.ErrExists, whoever asks, and leaves the first claim unchanged.
//   - PoolsIndependent: the same address in two pools (named so that one is a
//     prefix of the other) is two independent claims. With
//     Config.AddressesUnique, instead: the second pool's Create fails with
//     store.ErrExists; Get, List, Update and Delete in the second pool find
//     nothing (store.ErrNotFound) and leave the first pool's claim as it
//     was; once that is deleted, the second pool claims the address.
//   - Update: Update at the current revision succeeds and changes the revision;
//     at a stale revision it fails with store.ErrConflict and leaves the claim
//     unchanged; of an absent address it fails with store.ErrNotFound and does
//     not create one.
//   - Delete: Delete at a wrong revision fails with store.ErrConflict and keeps
//     the claim; at the right revision it removes it; again, it fails with
//     store.ErrNotFound. The address can then be created again, and the new claim
//     has a revision different from the deleted one's, so that a Delete or Update
//     at the old revision fails with store.ErrConflict instead of touching the
//     new holder's claim. (Revisions must never be reused for a key; a
//     backend-wide counter, like etcd's, satisfies this.)
//   - List: List returns exactly the claims of its pool, IPv4 and IPv6 mixed,
//     with their revisions, and not those of a pool whose name it prefixes; the
//     slice is the caller's: changing it does not change the store.
//   - Reopen: claims written through one instance are seen through a newly opened
//     one, by List and Get, and a Delete through the new one is seen by the old.
//   - CreateRace: 8 goroutines Create the same 64 addresses with different
//     owners; for each address exactly one Create succeeds and all others fail
//     with store.ErrExists, and List agrees with the winners.
//   - CreateRaceInstances: the same race, the goroutines split between two Store
//     instances from one Opener.
//   - UpdateRace: goroutines on two instances read a claim and Update it at the
//     revision they read; exactly one succeeds, all others fail with
//     store.ErrConflict, and the stored claim is the winner's.
//   - UpdateDeleteRace: the same with half of the goroutines deleting instead;
//     exactly one write succeeds, the others fail with store.ErrConflict or (after
//     a winning Delete) store.ErrNotFound.
//   - CanceledContext: with an already canceled context, Create, Update and
//     Delete must fail (with any error) and must not change what is stored, as
//     checked afterwards with a live context. This is required: the store.Store
//     contract says a call that cannot complete before its context is done leaves
//     the record unchanged. The suite does not require the error to wrap
//     context.Canceled, so that a client library that reports cancellation in its
//     own way still passes; implementations should wrap ctx.Err() all the same.
//   - InvalidClaim: Create and Update reject a claim without a pool, with an
//     invalid IP, without an owner, or with a time outside years 0 to 9999
//     (which RFC 3339 and JSON cannot write), with an error and without
//     panicking or storing it; Get and Delete of the invalid (zero) address
//     fail without panicking.
//   - Cursors: only if the Store implements store.Cursors (else the subtest is
//     skipped): an unset cursor is the zero Addr; a set cursor is returned, per
//     pool, and seen through a newly opened instance.
//   - CreateAndSetCursor: only if the Store implements store.CursorCreator (else
//     the subtest is skipped): it creates a claim as Create does (a positive
//     revision; the claim seen by Get and List through a newly opened instance,
//     where a Create of it fails with store.ErrExists), and moves the cursor of
//     the claim's pool, only that pool's, to the claim's address, as seen
//     through the new instance. It fails with store.ErrExists for an address
//     claimed by itself or by Create, and with an error for an invalid claim
//     or an already canceled context; every such failure leaves the claims
//     and the cursor as they were. A cursor set by SetCursor is moved by it,
//     and the reverse. In a race like CreateRaceInstances, in another pool,
//     with every other goroutine calling it instead of Create, each address
//     still has exactly one winner, and the cursor ends at an address it
//     created (or unset if it created none).
//   - Owned: claims of a pod on two interfaces and in two pools, one claim
//     that records no interface, a stable owner, a pod of the same name that
//     is not stable, and a stranger: Owned by UID, by container ID and, for the
//     stable owner only, by namespace/name returns exactly that owner's
//     claims, revisions included; narrowed to an interface, it returns that
//     interface's claims and the one that records none; unknown owners have
//     none; the slice is the caller's; invalid queries fail without panicking.
//   - OwnedInstances: the answer of one instance follows the writes of
//     another, also after it has answered before (no instance may keep
//     answers): a create, an Update that gives the claim to another owner, a
//     Delete, a create again at the same address, a stable owner's claim
//     re-pointed to a new UID (found by name, and by the new UID only), and a
//     newly opened instance agrees.
//   - OwnedRace: goroutines on two instances create, re-point and delete
//     claims of two owners on three shared addresses; every claim Owned
//     returns meanwhile is one the query matches, and afterwards Owned on
//     every instance equals what List holds.
//   - CreateExclusive: only if the Store implements store.ExclusiveCreator:
//     it creates like CreateAndSetCursor, and refuses, with a
//     *store.HeldError listing them and creating nothing, while the owner
//     holds a claim of the same family on the same interface or on none,
//     in any pool, before it checks whether the address is free; other
//     families, other interfaces, another owner of the same name that is not
//     stable are no conflict; a stable owner is one owner across pod UIDs.
//   - CreateExclusiveRace: for each of 16 owners, 8 goroutines on two
//     instances CreateExclusive a claim on the same interface at different
//     addresses: exactly one succeeds, the others fail with store.ErrHeld.
//   - Watch: only if the Store implements store.Watcher: a Watch started
//     after a claim was made reports it in its first Reset; creates, an Update
//     to another owner, deletes (one that nothing follows) and a create again
//     at the same address through another instance reach it, the changes of
//     one claim in the order made; after many writers on both instances its
//     view equals List; it returns an error wrapping context.Canceled soon
//     after its context is canceled.
//   - PoolVersion: only if the Store implements store.PoolVersioner: the
//     version of a pool stays the same without writes and changes with a
//     Create, an Update and a Delete made through another instance.
//   - RevisionsOrdered: only if the Store implements store.OrderedRevisions
//     and says its revisions are ordered: 8 goroutines on two instances
//     create claims of one owner, each reading Owned right after its create;
//     every answer holds every claim of a lower revision.
//   - AddressClaims: only if the Store implements store.AddressReader: the
//     claims of one address in two pools, and no other, through another
//     instance; an Update and a Delete are seen; the zero address fails.
//     With Config.AddressesUnique, at most one claim per address: the one
//     pool's, and after a Delete another pool's.
//   - AddressClaimsAtLeast: only if the Store implements
//     store.AddressClaimsAtLeast: right after each Create and Update of one
//     address through another instance, asked at that write's revision, it
//     has the write.
//   - ListAll: only if the Store implements store.ClaimLister: every claim
//     of every pool, both families, made through another instance, and no
//     deleted one.
//
// RunConfig runs the suite for a Store that keeps less than a whole Owner,
// or refuses more: with Config.ContainerOwners (host-local's format), the
// suite's owners have only a container ID and an interface, and owners are
// asked for by container ID; with Config.AddressesUnique (k8s/kubestore,
// whose objects are named by address), an address is claimed in one pool at
// a time, and no other check claims one address in two pools.
//
// Times are compared with a tolerance of one second, so that a store which keeps
// claim times only to the second passes; the claims use a fixed time in 2024 with
// a fractional second, so a store that substitutes its own clock still fails. The
// time's location need not survive, only the instant. Revisions are compared
// exactly and need only be positive and change on every write to a key; the suite
// does not require them to increase or to be ordered across keys.
//
// The suite takes well under a second for memstore, including under the race
// detector.
package storetest
