package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// openFlags open a file for reading without following a symbolic link and
// without blocking on a FIFO; the descriptor is not inherited by children.
const openFlags = syscall.O_RDONLY | syscall.O_CLOEXEC | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// fileState is what fstat reports about one file, reduced to what a claim needs.
type fileState struct {
	rev     int64
	mtime   time.Time
	size    int64
	nlink   uint64
	regular bool
}

// stat returns the state of the open file fd, with its revision if withRev.
func (s *Store) stat(fd int, path string, withRev bool) (fileState, error) {
	var st syscall.Stat_t
	if err := retryEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return fileState{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	var rev int64
	if withRev {
		gen, _ := generation(fd)
		rev = revision(&st, gen)
	}
	return fileState{
		rev:     rev,
		mtime:   time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)),
		size:    st.Size,
		nlink:   uint64(st.Nlink),
		regular: st.Mode&syscall.S_IFMT == syscall.S_IFREG,
	}, nil
}

// revision hashes (FNV-1a, 64 bits) the identity and state of a file: device,
// inode number and generation, change and modification times, size. The result
// is positive.
func revision(st *syscall.Stat_t, gen uint32) int64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, v := range [...]uint64{
		uint64(st.Dev), uint64(st.Ino), uint64(gen),
		uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec),
		uint64(st.Size),
	} {
		for range 8 {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	if r := int64(h >> 1); r != 0 {
		return r
	}
	return 1
}

// readFile reads the file at path whole. It returns the content and state of
// the file (with its revision if withRev), or why the file cannot be a claim
// (not a regular file, too large), or an error; an absent file is an error
// wrapping fs.ErrNotExist.
func (s *Store) readFile(path string, withRev bool) (data []byte, st fileState, bad string, err error) {
	s.step(stepRead)
	fd, err := openFile(path, openFlags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fileState{}, "a symbolic link, not a regular file", nil
		}
		return nil, fileState{}, "", err
	}
	defer syscall.Close(fd)
	if st, err = s.stat(fd, path, withRev); err != nil {
		return nil, fileState{}, "", err
	}
	switch {
	case !st.regular:
		return nil, st, "not a regular file", nil
	case st.size > maxFileSize:
		return nil, st, strconv.FormatInt(st.size, 10) + " bytes, more than any claim", nil
	}
	data, err = readAll(fd, path, st.size)
	if err != nil {
		return nil, fileState{}, "", err
	}
	return data, st, "", nil
}

// readAt reads the file name of the network directory into buf, as readFile
// reads it but without a path or an allocation, for the rebuild of the owner
// index. It returns nil data for a file that cannot be a claim (not a regular
// file, too large).
func (s *Store) readAt(name string, buf *[maxFileSize + 1]byte) ([]byte, error) {
	s.step(stepRead)
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = syscall.Openat(s.dirs.Load().net, name, openFlags, 0)
		return err
	})
	switch {
	case err == syscall.ELOOP:
		return nil, nil
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: s.path(name), Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := retryEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: s.path(name), Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size > maxFileSize {
		return nil, nil
	}
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: s.path(name), Err: err}
		case m == 0:
			return buf[:n], nil
		}
		n += m
	}
	return nil, nil // grew past any claim since fstat
}

// readAll reads the size bytes of the open file fd (path names it in errors),
// or fewer if it is shorter: it is being truncated, and what was read is
// what there is.
func readAll(fd int, path string, size int64) ([]byte, error) {
	data := make([]byte, size)
	n := 0
	for n < len(data) {
		m, err := syscall.Pread(fd, data[n:], int64(n))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			return data[:n], nil
		}
		n += m
	}
	return data, nil
}

// readlink is readlink(2), with EINTR retried. It returns the length of the
// target, which fills buf if it is as long or longer.
func readlink(path string, buf []byte) (int, error) {
	for {
		n, err := syscall.Readlink(path, buf)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// openFile is open(2) with EINTR retried and the error naming the path.
func openFile(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := syscall.Open(path, flags, perm)
		switch err {
		case nil:
			return fd, nil
		case syscall.EINTR:
			continue
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
}

// retryEINTR calls f until it fails with something other than EINTR.
func retryEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

// writeTemp writes data to a new temporary file in the directory, sets its
// modification time to mtime unless mtime is zero, and with Sync fsyncs it. It
// returns the file's name and an open descriptor, which the caller closes and
// which reports the file's state after it is published. On error nothing is
// left behind.
func (s *Store) writeTemp(data []byte, mtime time.Time) (tmp string, fd int, err error) {
	for attempt := 0; ; attempt++ {
		tmp = s.dir + "/" + tmpPrefix + strconv.FormatUint(rand.Uint64(), 36)
		fd, err = openFile(tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EEXIST) || attempt == 10 {
			return "", -1, err
		}
	}
	if err := s.fill(fd, tmp, data, mtime); err != nil {
		syscall.Close(fd)
		syscall.Unlink(tmp)
		return "", -1, err
	}
	return tmp, fd, nil
}

// fill writes data to the new, empty file fd, sets its modification time to
// mtime unless mtime is zero, and with Sync fsyncs it. path names the file in
// errors.
func (s *Store) fill(fd int, path string, data []byte, mtime time.Time) error {
	for n := 0; n < len(data); {
		m, err := syscall.Write(fd, data[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		n += m
	}
	if !mtime.IsZero() {
		if err := futimens(fd, mtime); err != nil {
			return &fs.PathError{Op: "futimens", Path: path, Err: err}
		}
		if mtime.Before(keptFrom) || !mtime.Before(keptUntil) {
			if err := checkMtime(fd, path, mtime); err != nil {
				return err
			}
		}
	}
	if s.sync {
		if err := retryEINTR(func() error { return syscall.Fsync(fd) }); err != nil {
			return &fs.PathError{Op: "fsync", Path: path, Err: err}
		}
	}
	return nil
}

// How a Store publishes a new claim file, from the cheapest way down. A Store
// starts at the first its kernel and options allow and moves down for good
// when the kernel refuses one.
const (
	// publishEmptyPath writes an unnamed O_TMPFILE inode and names it with
	// linkat(fd, "", AT_EMPTY_PATH), which needs CAP_DAC_READ_SEARCH (or, on
	// recent kernels, the credentials that opened the file).
	publishEmptyPath = iota
	// publishProc names the inode by linkat of /proc/self/fd/<fd>, which needs
	// /proc.
	publishProc
	// publishTemp writes a file under a temporary name, links it to its
	// address's name and removes the temporary name: two more directory
	// changes, and a temporary file that a crash can leave for Open to remove.
	publishTemp
)

// claimFile is a claim file written in full but not yet published.
type claimFile struct {
	fd  int    // open for writing; reports the file's state once published
	tmp string // its temporary name, or "" for an unnamed O_TMPFILE inode
}

// writeClaim writes data to a new claim file, not yet published, with its
// modification time set to mtime unless mtime is zero and, with Sync,
// fsynced. The caller publishes it with publish and closes f.fd.
func (s *Store) writeClaim(data []byte, mtime time.Time) (claimFile, error) {
	if s.publishing.Load() < publishTemp {
		fd, err := openFile(s.dir, oTmpfile|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o600)
		switch {
		case err == nil:
			if err := s.fill(fd, s.dir, data, mtime); err != nil {
				syscall.Close(fd) // the inode has no name: closing frees it
				return claimFile{}, err
			}
			return claimFile{fd: fd}, nil
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL):
			// The filesystem (EOPNOTSUPP) or the kernel (before 3.11) has
			// no O_TMPFILE.
			s.publishing.Store(publishTemp)
		default:
			return claimFile{}, err
		}
	}
	tmp, fd, err := s.writeTemp(data, mtime)
	if err != nil {
		return claimFile{}, err
	}
	return claimFile{fd: fd, tmp: tmp}, nil
}

// errUnnamed is returned by publish when the kernel will not name an unnamed
// inode: the caller writes the claim again under a temporary name.
var errUnnamed = errors.New("cannot link an O_TMPFILE file")

// publish gives the claim file f the name path, which must not exist: link(2)
// and linkat(2) fail with EEXIST if it does, which publish returns as
// syscall.EEXIST. A temporary name is removed whatever happens; should that
// fail, the claim stands with a second name that the next Open removes.
func (s *Store) publish(f claimFile, path string) error {
	if f.tmp != "" {
		err := retryEINTR(func() error { return syscall.Link(f.tmp, path) })
		syscall.Unlink(f.tmp)
		if err != nil && err != syscall.EEXIST {
			return &os.LinkError{Op: "link", Old: f.tmp, New: path, Err: err}
		}
		return err
	}
	for {
		var err error
		switch mode := s.publishing.Load(); mode {
		case publishEmptyPath:
			err = linkat(f.fd, "", atFDCWD, path, atEmptyPath)
			if err == syscall.ENOENT || err == syscall.EPERM {
				// Not allowed to name a descriptor: try /proc.
				s.publishing.CompareAndSwap(mode, publishProc)
				continue
			}
		case publishProc:
			err = linkat(atFDCWD, "/proc/self/fd/"+strconv.Itoa(f.fd), atFDCWD, path, atSymlinkFollow)
			if err == syscall.ENOENT || err == syscall.EPERM || err == syscall.EACCES {
				// No /proc, or not ours to use.
				s.publishing.CompareAndSwap(mode, publishTemp)
				return errUnnamed
			}
		default:
			return errUnnamed
		}
		if err != nil && err != syscall.EEXIST {
			return &os.LinkError{Op: "linkat", Old: "O_TMPFILE", New: path, Err: err}
		}
		return err
	}
}

// Constants of linkat(2) and utimensat(2) that package syscall lacks.
const (
	atFDCWD         = -0x64
	atSymlinkFollow = 0x400
	atEmptyPath     = 0x1000
	utimeOmit       = 1<<30 - 2
)

// linkat is linkat(2), with EINTR retried.
func linkat(olddirfd int, oldpath string, newdirfd int, newpath string, flags int) error {
	old, err := syscall.BytePtrFromString(oldpath)
	if err != nil {
		return err
	}
	nw, err := syscall.BytePtrFromString(newpath)
	if err != nil {
		return err
	}
	return syscall6(syscall.SYS_LINKAT, uintptr(olddirfd), uintptr(unsafe.Pointer(old)),
		uintptr(newdirfd), uintptr(unsafe.Pointer(nw)), uintptr(flags), 0)
}

// syscall6 makes a system call that returns only an error, with EINTR
// retried; a nil error for errno 0.
func syscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) error {
	return retryEINTR(func() error {
		if _, _, errno := syscall.Syscall6(trap, a1, a2, a3, a4, a5, a6); errno != 0 {
			return errno
		}
		return nil
	})
}

// futimens sets the modification time of the open file fd to mtime, leaving
// its access time, with EINTR retried.
func futimens(fd int, mtime time.Time) error {
	// Seconds and nanoseconds apart: UnixNano overflows after 2262.
	ts := [2]syscall.Timespec{{Nsec: utimeOmit}, {Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}}
	// utimensat(fd, NULL, times, 0) is futimens(fd, times).
	return syscall6(syscall.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
}

// keptFrom and keptUntil bound the modification times that every Linux file
// system keeps as they are given (32-bit seconds since 1970, unsigned for
// NFSv3): only a time outside them costs fill a read-back (checkMtime), so a
// claim made now costs no extra system call.
var (
	keptFrom  = time.Unix(0, 0)
	keptUntil = time.Unix(1<<31-1, 0)
)

// checkMtime returns an error if the file fd, named path in errors, does not
// have mtime as its modification time to the second: the file system keeps
// times in a range of its own (1901 to 2446 on ext4, 1901 to 2038 on older
// layouts) and changes one out of it to another, which a claim must not
// take for its time.
func checkMtime(fd int, path string, mtime time.Time) error {
	var st syscall.Stat_t
	if err := retryEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if kept := time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)); kept.Unix() != mtime.Unix() {
		return fmt.Errorf("time %s: the file system cannot keep it as a modification time (it kept %s)",
			mtime.UTC().Format(time.RFC3339Nano), kept.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// syncDir fsyncs the directory if the Store was opened with Sync, so that a
// link, rename or unlink survives a power loss.
func (s *Store) syncDir() error {
	if !s.sync {
		return nil
	}
	if err := retryEINTR(func() error { return syscall.Fsync(s.dirs.Load().net) }); err != nil {
		return &fs.PathError{Op: "fsync", Path: s.dir, Err: err}
	}
	return nil
}

// lock takes the Store's own lock, which orders the goroutines of this process
// (flock does not: they share one open file description), then flock(LOCK_EX)
// on the lock file, which orders processes. It gives up when ctx is done.
func (s *Store) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.closed.Load() {
		<-s.sem
		return os.ErrClosed
	}
	err := retryEINTR(func() error { return syscall.Flock(s.lockFd, syscall.LOCK_EX|syscall.LOCK_NB) })
	if err == syscall.EWOULDBLOCK {
		// Another process holds it. Wait in a goroutine, so that ctx can end
		// the wait; if it does, the goroutine releases what it gets.
		done := make(chan error, 1)
		go func() {
			done <- retryEINTR(func() error { return syscall.Flock(s.lockFd, syscall.LOCK_EX) })
		}()
		select {
		case err = <-done:
		case <-ctx.Done():
			go func() {
				if <-done == nil {
					syscall.Flock(s.lockFd, syscall.LOCK_UN)
				}
				<-s.sem
			}()
			return ctx.Err()
		}
	}
	if err != nil {
		<-s.sem
		return &fs.PathError{Op: "flock", Path: s.dir + "/" + lockName, Err: err}
	}
	if err := ctx.Err(); err != nil {
		s.unlock()
		return err
	}
	return nil
}

// unlock releases what lock took.
// tryLock takes the lock if no one holds it, and reports whether it did.
func (s *Store) tryLock() (bool, error) {
	select {
	case s.sem <- struct{}{}:
	default:
		return false, nil
	}
	err := retryEINTR(func() error { return syscall.Flock(s.lockFd, syscall.LOCK_EX|syscall.LOCK_NB) })
	if err == syscall.EWOULDBLOCK {
		<-s.sem
		return false, nil
	}
	if err != nil {
		<-s.sem
		return false, &fs.PathError{Op: "flock", Path: s.dir + "/" + lockName, Err: err}
	}
	return true, nil
}

func (s *Store) unlock() {
	syscall.Flock(s.lockFd, syscall.LOCK_UN)
	<-s.sem
}
