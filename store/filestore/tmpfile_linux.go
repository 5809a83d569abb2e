//go:build linux && (386 || amd64 || arm || arm64 || loong64 || riscv64 || s390x)

package filestore

import "syscall"

// oTmpfile is O_TMPFILE, which package syscall does not define: __O_TMPFILE,
// 020000000 in the generic encoding these architectures share, with
// O_DIRECTORY.
const oTmpfile = 0o20000000 | syscall.O_DIRECTORY
