package filestore

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"time"
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

// stat returns the state of the open file fd.
func (s *Store) stat(fd int, path string) (fileState, error) {
	var st syscall.Stat_t
	if err := retryEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return fileState{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	gen, _ := generation(fd)
	return fileState{
		rev:     revision(&st, gen),
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
// the file, or why the file cannot be a claim (not a regular file, too large),
// or an error; an absent file is an error wrapping fs.ErrNotExist.
func (s *Store) readFile(path string) (data []byte, st fileState, bad string, err error) {
	fd, err := openFile(path, openFlags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fileState{}, "a symbolic link, not a regular file", nil
		}
		return nil, fileState{}, "", err
	}
	defer syscall.Close(fd)
	if st, err = s.stat(fd, path); err != nil {
		return nil, fileState{}, "", err
	}
	switch {
	case !st.regular:
		return nil, st, "not a regular file", nil
	case st.size > maxFileSize:
		return nil, st, strconv.FormatInt(st.size, 10) + " bytes, more than any claim", nil
	}
	data = make([]byte, st.size)
	n := 0
	for n < len(data) {
		m, err := syscall.Pread(fd, data[n:], int64(n))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, fileState{}, "", &fs.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			// Shorter than fstat said: it is being truncated under us; what
			// was read is what there is.
			return data[:n], st, "", nil
		}
		n += m
	}
	return data, st, "", nil
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
	fail := func(err error) (string, int, error) {
		syscall.Close(fd)
		syscall.Unlink(tmp)
		return "", -1, err
	}
	for n := 0; n < len(data); {
		m, err := syscall.Write(fd, data[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return fail(&fs.PathError{Op: "write", Path: tmp, Err: err})
		}
		n += m
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(tmp, time.Time{}, mtime); err != nil {
			return fail(err)
		}
	}
	if s.sync {
		if err := retryEINTR(func() error { return syscall.Fsync(fd) }); err != nil {
			return fail(&fs.PathError{Op: "fsync", Path: tmp, Err: err})
		}
	}
	return tmp, fd, nil
}

// syncDir fsyncs the directory if the Store was opened with Sync, so that a
// link, rename or unlink survives a power loss.
func (s *Store) syncDir() error {
	if !s.sync {
		return nil
	}
	if err := retryEINTR(func() error { return syscall.Fsync(s.dirFd) }); err != nil {
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
