//go:build linux && !(386 || amd64 || arm || arm64 || loong64 || riscv64 || s390x)

package filestore

// oTmpfile is zero on architectures whose O_TMPFILE this package does not
// spell out: claim files are then always written under a temporary name.
const oTmpfile = 0
