//go:build race

package ipamtest_test

// raceEnabled reports whether the tests run with the race detector: the
// binaries TestMutants builds are built the same way, so that they share
// the build cache.
const raceEnabled = true
