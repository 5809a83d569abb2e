// Package benchmarks runs the same allocation workloads on this library and on
// the peer allocators users run today, in one process and one `go test -bench`
// run, so that the ratios between them are measured rather than quoted.
//
// The package itself only adapts each allocator to one small interface
// (Allocator) and builds it over a pool already filled to a level (Peer.New,
// Peer.Pair). The workloads are the benchmarks in bench_test.go; the program in
// cmd/report runs them and writes the table in README.md.
//
// Every allocator serves the same addresses: the subnet minus its network
// address, its first host (host-local's default gateway) and, for IPv4, its
// broadcast address. Each peer is configured, or pre-filled, so that it hands
// out exactly those.
//
// The peers, at the versions pinned in go.mod:
//
//   - CNI host-local's allocator (containernetworking/plugins,
//     plugins/ipam/host-local/backend/allocator), once with its disk store
//     (backend/disk, one file per address in a temporary directory) and once
//     with its in-memory test store (backend/testing.FakeStore), and once
//     over an in-memory store written here that also indexes addresses by
//     owner (HostLocalIndexed), so that host-local's algorithm is measured
//     without the FakeStore's scan of every address on each Get and Release;
//   - Whereabouts' allocation function (pkg/allocate.AssignIP and
//     DeallocateIP) over an in-memory reservation list: the pure part of
//     Whereabouts, without the Kubernetes API round trips of its IPPool, so a
//     lower bound of what it costs in a cluster;
//   - metal-stack/go-ipam with its in-memory storage;
//   - a plain bitmap written here, the floor: a word-at-a-time search from a
//     round-robin cursor and nothing else (no owners, no store).
//
// This package is not an API: it exists to be benchmarked. An Allocator is not
// safe for concurrent use unless it comes from Peer.Pair.
package benchmarks
