//go:build !linux

package benchmarks

// The filestore is for Linux only; elsewhere only host-local's disk store runs.
func diskPeers() []Peer { return []Peer{HostLocalDisk()} }
