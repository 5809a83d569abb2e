// Package hostlocaltest runs CNI host-local v1.9.1's own binary, built from
// its module, side by side with package filestore on one network directory,
// as during a rollout that replaces one with the other: what host-local
// writes must reach the filestore's owner index, and nothing the filestore
// writes may disturb host-local. It holds tests only, in a module of its own
// so that the core module does not depend on the CNI plugins.
package hostlocaltest
