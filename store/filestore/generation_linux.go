//go:build linux && (386 || amd64 || arm || arm64 || loong64 || riscv64 || s390x)

package filestore

import (
	"syscall"
	"unsafe"
)

// fsIocGetversion is FS_IOC_GETVERSION, _IOR('v', 1, long), in the generic
// ioctl encoding these architectures share.
const fsIocGetversion = 2<<30 | uintptr(unsafe.Sizeof(uintptr(0)))<<16 | 'v'<<8 | 1

// generation returns the inode generation of the open file fd, which ext4 and
// xfs set afresh (at random) whenever they reuse an inode number, and ok false
// if the filesystem does not report one.
func generation(fd int) (gen uint32, ok bool) {
	// The kernel writes an int; the buffer is as large as a long, the size the
	// request number declares.
	var buf uintptr
	for {
		_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), fsIocGetversion, uintptr(unsafe.Pointer(&buf)))
		switch errno {
		case 0:
			return *(*uint32)(unsafe.Pointer(&buf)), true
		case syscall.EINTR:
			continue
		}
		return 0, false
	}
}
