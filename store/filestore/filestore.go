//go:build linux

package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipamkit/ipam/store"
)

// Compile-time checks that *Store provides the contract and its capabilities.
var (
	_ store.Store            = (*Store)(nil)
	_ store.Cursors          = (*Store)(nil)
	_ store.CursorCreator    = (*Store)(nil)
	_ store.ExclusiveCreator = (*Store)(nil)
)

// Pool maps a pool name onto the network directory: which addresses belong to
// it, and which last_reserved_ip.<Index> file holds its cursor.
//
// The zero Pool is not valid: it needs a name and prefixes. A Pool is a plain
// value; Open copies what it needs.
type Pool struct {
	// Name is the store.Claim.Pool of the pool's claims.
	Name string
	// Index names the pool's cursor file, last_reserved_ip.<Index>: host-local's
	// range-set index.
	Index int
	// Prefixes are the addresses of the pool, without host bits set. A range
	// that is not a prefix is covered by several (netipx.IPRange.Prefixes).
	Prefixes []netip.Prefix
}

// contains reports whether ip belongs to p.
func (p *Pool) contains(ip netip.Addr) bool {
	for _, pfx := range p.Prefixes {
		if pfx.Contains(ip) {
			return true
		}
	}
	return false
}

// Options configure a Store.
//
// The zero Options is not valid: Pools is required. Options are plain values.
type Options struct {
	// Pools are the pools whose claims live in the directory. Names and indexes
	// are unique; prefixes are valid, without host bits, and disjoint across all
	// pools, so that every address belongs to at most one pool. A claim is
	// listed under the pool whose prefixes contain its address; files of
	// addresses outside every pool are left alone.
	Pools []Pool
	// Sync fsyncs every file written and the directory after every change, so
	// that a write that returned survives a power loss, at the cost of the
	// fsyncs, and writes every claim and cursor file under a temporary name
	// first (see the package documentation). A process crash loses nothing
	// either way.
	Sync bool
	// IndexDir is the directory of the owner index (see the package
	// documentation, Owners). By default it is .ipam-owners/<network name>
	// in the directory that holds the network directory: <dataDir>/
	// .ipam-owners/<name>, which no CNI network can be called. It must not
	// be inside the network directory, whose every file host-local reads,
	// and every Store of one network directory must use the same.
	IndexDir string
	// Logger receives what the owner index reports: each rebuild and why,
	// and corrupt index files, by name. Nil discards it.
	Logger *slog.Logger
	// Progress, if set, is told how a rebuild of the owner index goes
	// (Open's, or a later call's), which reads every claim file and then
	// writes an entry per owner: done of total items of what ("claim
	// files", of a total not known beforehand, 0; then "owners"), every
	// ProgressEvery items, from the goroutine that rebuilds. A program that
	// opens a large directory for a user (ipamctl) shows it; nil says
	// nothing.
	Progress func(done, total int, what string)
}

// ProgressEvery is how many claim files or owners a rebuild of the owner
// index handles between two calls of Options.Progress.
const ProgressEvery = 1024

// Validate reports every problem of o at once, each naming the field.
func (o Options) Validate() error {
	var errs []error
	if len(o.Pools) == 0 {
		errs = append(errs, errors.New("pools is empty: a directory needs at least one pool"))
	}
	names := make(map[string]int, len(o.Pools))
	indexes := make(map[int]int, len(o.Pools))
	type seen struct {
		pfx   netip.Prefix
		field string
	}
	var prefixes []seen
	for i, p := range o.Pools {
		field := fmt.Sprintf("pools[%d]", i)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name is empty", field))
		} else if j, dup := names[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name %q: also the name of pools[%d]", field, p.Name, j))
		} else {
			names[p.Name] = i
		}
		if p.Index < 0 {
			errs = append(errs, fmt.Errorf("%s.index %d: negative", field, p.Index))
		} else if j, dup := indexes[p.Index]; dup {
			errs = append(errs, fmt.Errorf("%s.index %d: also the index of pools[%d]", field, p.Index, j))
		} else {
			indexes[p.Index] = i
		}
		if len(p.Prefixes) == 0 {
			errs = append(errs, fmt.Errorf("%s.prefixes is empty", field))
		}
		for k, pfx := range p.Prefixes {
			field := fmt.Sprintf("%s.prefixes[%d]", field, k)
			if !pfx.IsValid() {
				errs = append(errs, fmt.Errorf("%s: invalid prefix", field))
				continue
			}
			if m := pfx.Masked(); m != pfx {
				errs = append(errs, fmt.Errorf("%s %s: host bits set; the prefix is %s", field, pfx, m))
				continue
			}
			for _, q := range prefixes {
				if q.pfx.Overlaps(pfx) {
					errs = append(errs, fmt.Errorf("%s %s overlaps %s %s", field, pfx, q.field, q.pfx))
				}
			}
			prefixes = append(prefixes, seen{pfx, field})
		}
	}
	return errors.Join(errs...)
}

// Store is a store.Store, with store.Cursors, store.CursorCreator and
// store.ExclusiveCreator, on one network directory in host-local's format
// (see the package documentation).
//
// The zero Store is not usable; create one with Open. A *Store is safe for
// concurrent use by multiple goroutines, and by other processes on the same
// directory.
type Store struct {
	dir    string
	sync   bool
	pools  map[string]*pool
	order  []*pool // the pools in Options order
	lockFd int     // the lock file, for flock
	// dirs are the network and index directories, open. Readers without
	// the lock use them; a rebuild under the lock replaces them if the
	// directories were made again, and retires the old descriptors, which
	// Close closes.
	dirs    atomic.Pointer[dirFds]
	retired []int

	idxDir string                     // the owner index's directory
	boot   string                     // this boot's ID
	state  atomic.Pointer[indexState] // the index's state as last read or written
	log    *slog.Logger
	// progress is Options.Progress, or a no-op.
	progress func(done, total int, what string)
	// markWarn logs once that the directories cannot be marked.
	markWarn sync.Once
	// hook, if set (by tests), is called at each step of a write.
	hook func(step string)

	sem        chan struct{} // held by the goroutine that holds the flock
	closed     atomic.Bool
	publishing atomic.Int32 // how Create publishes a claim file: publishEmptyPath...
}

// pool is a configured pool and its cursor file.
type pool struct {
	Pool
	cursorPath string
	// cursorFd is the cursor file that the Store last wrote, kept open for
	// writing to it again in place, or -1. It is used under the lock only.
	cursorFd int
}

// Open opens the network directory dir, <dataDir>/<network name>, creating it
// with mode 0755 and its lock file if missing, and its owner index directory
// (Options.IndexDir) with mode 0700. If the index is not known to be complete
// and no other process holds the lock, it rebuilds the index, which reads
// every claim file, and removes the temporary files a crashed writer left in
// either directory. Close releases the Store's descriptors.
func Open(dir string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	idx := opts.IndexDir
	if idx == "" {
		var err error
		if idx, err = indexDir(dir); err != nil {
			return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
		}
	}
	if err := checkIndexDir(dir, idx); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(idx, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: open %s: owner index: %w", dir, err)
	}
	s := &Store{
		dir:    strings.TrimSuffix(dir, "/"),
		sync:   opts.Sync,
		pools:  make(map[string]*pool, len(opts.Pools)),
		sem:    make(chan struct{}, 1),
		idxDir: strings.TrimSuffix(idx, "/"),
		boot:   bootID(),
		log:    opts.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.progress = opts.Progress
	if s.progress == nil {
		s.progress = func(int, int, string) {}
	}
	if s.dir == "" {
		s.dir = "/"
	}
	if oTmpfile == 0 || s.sync {
		// With Sync, a claim file is fsynced before it is published, and
		// must then be on disk with the link count its name gives it: a
		// temporary name gives it one; an O_TMPFILE inode has none.
		s.publishing.Store(publishTemp)
	}
	for _, p := range opts.Pools {
		p.Prefixes = append([]netip.Prefix(nil), p.Prefixes...)
		s.pools[p.Name] = &pool{Pool: p, cursorPath: s.path(cursorPrefix + strconv.Itoa(p.Index)), cursorFd: -1}
		s.order = append(s.order, s.pools[p.Name])
	}
	var err error
	// host-local creates the lock file O_CREAT|O_RDONLY with mode 0750.
	if s.lockFd, err = openFile(s.path(lockName), syscall.O_RDONLY|syscall.O_CREAT|syscall.O_CLOEXEC, 0o750); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	fds := &dirFds{}
	if fds.net, err = openFile(s.dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err != nil {
		syscall.Close(s.lockFd)
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	if fds.idx, err = openFile(s.idxDir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err != nil {
		syscall.Close(s.lockFd)
		syscall.Close(fds.net)
		return nil, fmt.Errorf("filestore: open %s: owner index: %w", dir, err)
	}
	s.dirs.Store(fds)
	if err := s.refresh(); err != nil {
		s.Close()
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	return s, nil
}

// refresh rebuilds the owner index, under the lock, if it is not known to be
// complete: after host-local or another program changed the directory, after
// a writer died (which also removes the temporary files it left), after a
// reboot. Every temporary file is created and removed under the lock, so none
// is in use while it is held. If another process holds the lock now, it does
// nothing rather than wait: that process is alive, and the first call that
// needs the index rebuilds it.
func (s *Store) refresh() error {
	if ok, err := s.tryLock(); err != nil || !ok {
		return err
	}
	defer s.unlock()
	if _, why := s.indexValid(); why != "" {
		_, err := s.rebuild(context.Background(), why)
		return err
	}
	return nil
}

// walk calls f with the name of every entry of directory dir, in directory
// order, reading the names in batches.
func (s *Store) walk(dir string, f func(name string) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if err := f(name); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Close releases the Store's file descriptors; calls made after it fail. It
// waits for a write in progress to finish, and for a wait on another
// process's lock that a cancelled call left behind to get the lock. It does
// not remove any file.
func (s *Store) Close() error {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.closed.Swap(true) {
		return fmt.Errorf("filestore: close %s: %w", s.dir, os.ErrClosed)
	}
	fds := s.dirs.Load()
	errs := []error{syscall.Close(s.lockFd), syscall.Close(fds.net), syscall.Close(fds.idx)}
	for _, fd := range s.retired {
		errs = append(errs, syscall.Close(fd))
	}
	for _, p := range s.pools {
		if p.cursorFd >= 0 {
			errs = append(errs, syscall.Close(p.cursorFd))
			p.cursorFd = -1
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("filestore: close %s: %w", s.dir, err)
	}
	return nil
}

// path returns the path of the directory entry name.
func (s *Store) path(name string) string { return s.dir + "/" + name }

// claimPath returns the path of ip's claim file.
func (s *Store) claimPath(ip netip.Addr) string { return s.path(ip.String()) }

// errInvalidIP is returned, wrapped, when asked about the zero netip.Addr.
var errInvalidIP = errors.New("ip is not a valid address")

// Get returns the claim for ip in pool. It returns an error wrapping
// store.ErrNotFound if there is none (also for an unknown pool, or an address
// outside the pool's prefixes), and a *CorruptError if the file at the
// address's name is not a claim.
func (s *Store) Get(ctx context.Context, poolName string, ip netip.Addr) (store.Claim, error) {
	fail := func(err error) (store.Claim, error) {
		return store.Claim{}, fmt.Errorf("filestore: get %s/%s: %w", poolName, ip, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	if !ip.IsValid() {
		return fail(errInvalidIP)
	}
	p := s.pools[poolName]
	if p == nil || !p.contains(ip) {
		return fail(store.ErrNotFound)
	}
	c, again, err := s.readClaim(p, ip, s.claimPath(ip))
	if again {
		if err := s.lock(ctx); err != nil {
			return fail(err)
		}
		c, _, err = s.readClaim(p, ip, s.claimPath(ip))
		s.unlock()
	}
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// readClaim reads the claim file of ip in p at path. It returns an error
// wrapping store.ErrNotFound if there is none, or a *CorruptError. Without the
// lock, it reports again true where a writer may be in the middle of writing
// the file: the file is corrupt (host-local creates the file, then writes it)
// or linked under a second name (a Create publishing it): reading it again
// under the lock gives the settled answer.
func (s *Store) readClaim(p *pool, ip netip.Addr, path string) (c store.Claim, again bool, err error) {
	data, st, bad, err := s.readFile(path, true)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return store.Claim{}, false, fmt.Errorf("%s: %w", path, store.ErrNotFound)
		}
		return store.Claim{}, false, err
	}
	var owner store.Owner
	if bad == "" {
		owner, bad = parseContent(data)
	}
	if bad != "" {
		return store.Claim{}, true, &CorruptError{Path: path, IP: ip, Revision: st.rev, Reason: bad}
	}
	c = store.Claim{Pool: p.Name, IP: ip, Owner: owner, Time: st.mtime, Revision: st.rev}
	return c, st.nlink != 1, nil
}

// List returns every claim of pool, in no particular order, in a new slice the
// caller owns. An unknown pool has no claims.
//
// It reads the directory and every file of the pool's addresses under the
// lock, so that what it returns is the directory at one moment: no claim
// deleted and another created meanwhile are both in it. Writers, this
// package's and host-local's, wait for it meanwhile.
//
// If some files of the pool's addresses are corrupt, List returns the claims it
// could read together with an error that joins one *CorruptError per corrupt
// file (errors.Is(err, ErrCorrupt) reports true); their addresses stay taken.
// On any other error it returns no claims.
func (s *Store) List(ctx context.Context, poolName string) ([]store.Claim, error) {
	fail := func(err error) ([]store.Claim, error) {
		return nil, fmt.Errorf("filestore: list %s: %w", poolName, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	p := s.pools[poolName]
	if p == nil {
		return []store.Claim{}, nil
	}
	if err := s.lock(ctx); err != nil {
		return fail(err)
	}
	defer s.unlock()
	var (
		claims  = []store.Claim{}
		corrupt []error
		n       int
	)
	err := s.walk(s.dir, func(name string) error {
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ip, badName, ok := claimName(name)
		if !ok || !p.contains(ip) {
			return nil
		}
		if badName != "" {
			corrupt = append(corrupt, &CorruptError{Path: s.path(name), IP: ip, Reason: "file name " + badName})
			return nil
		}
		c, _, err := s.readClaim(p, ip, s.path(name))
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			corrupt = append(corrupt, ce)
		case errors.Is(err, store.ErrNotFound): // removed by a writer that does not lock
		case err != nil:
			return err
		default:
			claims = append(claims, c)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if len(corrupt) > 0 {
		return claims, fmt.Errorf("filestore: list %s: %d corrupt claim files: %w", poolName, len(corrupt), errors.Join(corrupt...))
	}
	return claims, nil
}

// ready reports why the Store cannot serve a call: ctx is done, or it is closed.
func (s *Store) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return os.ErrClosed
	}
	return nil
}

// checkClaim reports why c cannot be written in host-local's format.
func checkClaim(c store.Claim) error {
	if err := errors.Join(c.Validate(), checkOwner(c.Owner)); err != nil {
		return err
	}
	if c.IP.Zone() != "" || c.IP.Is4In6() {
		return fmt.Errorf("ip %s: host-local names files by plain IPv4 or IPv6 addresses", c.IP)
	}
	return nil
}

// Create stores c if no claim exists for (c.Pool, c.IP) and returns it with its
// new Revision and, as Time, the file's modification time (c.Time, or the time
// of the write if c.Time is zero); c.Revision is ignored. It returns an error
// wrapping store.ErrExists if the address's file exists, whatever it holds. It
// fails, storing nothing, if c is not a valid claim, if its owner cannot be
// written in host-local's format (ErrUnsupportedOwner), if its pool is not
// one of Options.Pools or does not contain its address, or if c.Time is one
// the file system cannot keep as a modification time (before 1901, or after
// 2446 on ext4): a claim's time is kept to the second or refused, never
// changed.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, createPlain)
}

// CreateAndSetCursor is Create and, if the claim was created, SetCursor(c.Pool,
// c.IP), under one hold of the lock, as host-local's Reserve writes an
// address's file and last_reserved_ip together. It fails as Create fails; a
// failure to write the cursor once the claim is created is not reported, as
// the cursor is a hint. With Options.Sync, one fsync of the directory covers
// both files; should it fail, the claim is taken back, as Create takes it
// back, but the cursor may already have moved to its address.
func (s *Store) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, createCursor)
}

// The kinds of create.
const (
	createPlain     = iota // Create
	createCursor           // CreateAndSetCursor
	createExclusive        // CreateExclusive
)

// create is Create, CreateAndSetCursor or CreateExclusive, as kind says.
func (s *Store) create(ctx context.Context, c store.Claim, kind int) (store.Claim, error) {
	fail := func(err error) (store.Claim, error) {
		return store.Claim{}, fmt.Errorf("filestore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	if err := checkClaim(c); err != nil {
		return fail(err)
	}
	p := s.pools[c.Pool]
	switch {
	case p == nil:
		return fail(fmt.Errorf("unknown pool %q: not in Options.Pools", c.Pool))
	case !p.contains(c.IP):
		return fail(fmt.Errorf("ip %s is not in pool %q's prefixes %v", c.IP, c.Pool, p.Prefixes))
	}
	h, err := s.begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.end(h)
	id := c.Owner.ContainerID
	if kind == createExclusive {
		held, err := s.owned(ctx, h, id)
		if err != nil {
			return fail(err)
		}
		if err := heldError(c, held); err != nil {
			return store.Claim{}, fmt.Errorf("filestore: %w", err)
		}
	}
	path := s.claimPath(c.IP)
	var st syscall.Stat_t
	switch err := retryEINTR(func() error { return syscall.Lstat(path, &st) }); err {
	case nil:
		return fail(fmt.Errorf("%s: %w", path, store.ErrExists))
	case syscall.ENOENT:
	default:
		return fail(&fs.PathError{Op: "lstat", Path: path, Err: err})
	}
	// The index entry comes first, so that no claim file of this package's
	// is ever without one.
	if err := s.addEntry(h, id, c.IP); err != nil {
		return fail(err)
	}
	s.step(stepEntryAdded)
	f, err := s.publishClaim(h, c, path)
	if err != nil {
		s.dropEntry(h, id, c.IP)
		return fail(err)
	}
	defer syscall.Close(f.fd)
	s.step(stepPublished)
	if kind != createPlain {
		s.putCursor(p, c.IP) // a hint: a failure leaves the claim as it is
		s.step(stepCursor)
	}
	if err := s.syncDir(); err != nil {
		syscall.Unlink(path) // not durable: take it back, still under the lock
		s.dropEntry(h, id, c.IP)
		return fail(err)
	}
	st2, err := s.stat(f.fd, path, true)
	if err != nil {
		return fail(err)
	}
	c.Time, c.Revision = st2.mtime, st2.rev
	return c, nil
}

// publishClaim writes c's claim file and names it path, under h. It returns
// an error wrapping store.ErrExists if path exists.
func (s *Store) publishClaim(h *hold, c store.Claim, path string) (claimFile, error) {
	data := content(c.Owner)
	h.netChanged = true // a temporary file, or the claim's name
	f, err := s.writeClaim(data, c.Time)
	if err != nil {
		return claimFile{}, err
	}
	err = s.publish(f, path)
	if err == errUnnamed {
		// The kernel will not name an unnamed file after all: write it
		// again under a temporary name.
		syscall.Close(f.fd)
		if f, err = s.writeClaim(data, c.Time); err != nil {
			return claimFile{}, err
		}
		err = s.publish(f, path)
	}
	switch {
	case err == syscall.EEXIST:
		syscall.Close(f.fd)
		return claimFile{}, fmt.Errorf("%s: %w", path, store.ErrExists)
	case err != nil:
		syscall.Close(f.fd)
		return claimFile{}, err
	}
	return f, nil
}

// current opens the claim file of ip, under the lock, and checks that its
// revision is rev. It returns the open descriptor, which the caller closes,
// and the container ID the file holds ("" if it is corrupt), or an error
// wrapping store.ErrNotFound or store.ErrConflict. A corrupt file has a
// revision like any other, so a writer that read it from a *CorruptError can
// replace or remove it.
func (s *Store) current(ip netip.Addr, rev int64) (fd int, id string, err error) {
	path := s.claimPath(ip)
	fd, err = openFile(path, openFlags, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return -1, "", fmt.Errorf("%s: %w", path, store.ErrNotFound)
	case errors.Is(err, syscall.ELOOP):
		// A symbolic link has no revision a caller could know.
		return -1, "", fmt.Errorf("%s is a symbolic link: %w", path, store.ErrConflict)
	case err != nil:
		return -1, "", err
	}
	st, err := s.stat(fd, path, true)
	if err != nil {
		syscall.Close(fd)
		return -1, "", err
	}
	if st.rev != rev {
		syscall.Close(fd)
		return -1, "", fmt.Errorf("%s at revision %d (current %d): %w", path, rev, st.rev, store.ErrConflict)
	}
	if st.regular && st.size <= maxFileSize {
		data, err := readAll(fd, path, st.size)
		if err != nil {
			syscall.Close(fd)
			return -1, "", err
		}
		if owner, bad := parseContent(data); bad == "" {
			id = owner.ContainerID
		}
	}
	return fd, id, nil
}

// Update replaces the claim for (c.Pool, c.IP) with c if its current revision is
// rev, and returns it with its new Revision and Time, as Create does; c.Revision
// is ignored. It returns an error wrapping store.ErrNotFound if there is no
// claim (also for an unknown pool, or an address outside the pool's prefixes)
// and store.ErrConflict if the revision differs, and fails as Create does if c
// cannot be stored. The new file is renamed over the old one: a reader sees
// one or the other.
func (s *Store) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	fail := func(err error) (store.Claim, error) {
		return store.Claim{}, fmt.Errorf("filestore: update %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	if err := checkClaim(c); err != nil {
		return fail(err)
	}
	p := s.pools[c.Pool]
	if p == nil || !p.contains(c.IP) {
		return fail(store.ErrNotFound)
	}
	h, err := s.begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.end(h)
	old, oldID, err := s.current(c.IP, rev)
	if err != nil {
		return fail(err)
	}
	// Holding the old file open keeps its inode in use, so the new file gets
	// another inode number and so another revision.
	defer syscall.Close(old)
	id := c.Owner.ContainerID
	if id != oldID {
		if err := s.addEntry(h, id, c.IP); err != nil {
			return fail(err)
		}
		s.step(stepEntryAdded)
	}
	path := s.claimPath(c.IP)
	h.netChanged = true
	tmp, fd, err := s.writeTemp(content(c.Owner), c.Time)
	if err != nil {
		return fail(err)
	}
	defer syscall.Close(fd)
	if err := retryEINTR(func() error { return syscall.Rename(tmp, path) }); err != nil {
		syscall.Unlink(tmp)
		return fail(&os.LinkError{Op: "rename", Old: tmp, New: path, Err: err})
	}
	s.step(stepReplaced)
	if oldID != "" && oldID != id {
		s.dropEntry(h, oldID, c.IP)
		s.step(stepEntryDropped)
	}
	if err := s.syncDir(); err != nil {
		return fail(err)
	}
	st, err := s.stat(fd, path, true)
	if err != nil {
		return fail(err)
	}
	c.Time, c.Revision = st.mtime, st.rev
	return c, nil
}

// Delete removes the claim for ip in pool if its current revision is rev. It
// returns an error wrapping store.ErrNotFound if there is no claim (also for an
// unknown pool, or an address outside the pool's prefixes) and
// store.ErrConflict if the revision differs.
func (s *Store) Delete(ctx context.Context, poolName string, ip netip.Addr, rev int64) error {
	fail := func(err error) error {
		return fmt.Errorf("filestore: delete %s/%s: %w", poolName, ip, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	if !ip.IsValid() {
		return fail(errInvalidIP)
	}
	if p := s.pools[poolName]; p == nil || !p.contains(ip) {
		return fail(store.ErrNotFound)
	}
	h, err := s.begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.end(h)
	fd, id, err := s.current(ip, rev)
	if err != nil {
		return fail(err)
	}
	defer syscall.Close(fd)
	path := s.claimPath(ip)
	h.netChanged = true
	if err := syscall.Unlink(path); err != nil {
		return fail(&fs.PathError{Op: "unlink", Path: path, Err: err})
	}
	s.step(stepRemoved)
	if err := s.syncDir(); err != nil {
		return fail(err)
	}
	// The index entry goes last, so that no claim file is ever without one.
	if id != "" {
		s.dropEntry(h, id, ip)
		s.step(stepEntryDropped)
	}
	return nil
}

// Cursor returns the address recorded in pool's last_reserved_ip.<Index> file,
// or the zero Addr if there is none, the pool is unknown, the file is empty
// (host-local died between its truncation and its write), or the address is
// not in the pool (as host-local, which ignores a cursor outside its range
// set). It returns an error naming the file if the content is not an address.
// It reads under the lock, as host-local does, because writers rewrite the file
// in place.
func (s *Store) Cursor(ctx context.Context, poolName string) (netip.Addr, error) {
	fail := func(err error) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("filestore: cursor %s: %w", poolName, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	p := s.pools[poolName]
	if p == nil {
		return netip.Addr{}, nil
	}
	if err := s.lock(ctx); err != nil {
		return fail(err)
	}
	ip, err := s.readCursor(p)
	s.unlock()
	if err != nil {
		return fail(err)
	}
	return ip, nil
}

// readCursor reads p's cursor file, under the lock.
func (s *Store) readCursor(p *pool) (netip.Addr, error) {
	data, _, bad, err := s.readFile(p.cursorPath, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return netip.Addr{}, nil
	case err != nil:
		return netip.Addr{}, err
	case bad != "":
		return netip.Addr{}, fmt.Errorf("%s: %s", p.cursorPath, bad)
	}
	text := strings.TrimSpace(string(data))
	if text == "" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(text)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s: content %s is not an IP address", p.cursorPath, quote(data))
	}
	if !p.contains(ip.Unmap()) {
		return netip.Addr{}, nil
	}
	return ip.Unmap(), nil
}

// SetCursor records ip as the last address reserved in pool, in its
// last_reserved_ip.<Index> file: written over in place (as host-local
// rewrites it) when the new content is no shorter, else, and always with
// Options.Sync, replaced by rename(2). Setting the zero Addr removes the file.
// It fails if the pool is unknown or ip is not in it. A cursor is a hint, not
// a claim: setting it changes no revision.
func (s *Store) SetCursor(ctx context.Context, poolName string, ip netip.Addr) error {
	fail := func(err error) error {
		return fmt.Errorf("filestore: set cursor %s to %s: %w", poolName, ip, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	p := s.pools[poolName]
	switch {
	case p == nil:
		return fail(fmt.Errorf("unknown pool %q: not in Options.Pools", poolName))
	case ip.IsValid() && !p.contains(ip):
		return fail(fmt.Errorf("ip %s is not in pool %q's prefixes %v", ip, poolName, p.Prefixes))
	}
	h, err := s.begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.end(h)
	if !ip.IsValid() {
		s.forgetCursor(p)
		h.netChanged = true
		if err := syscall.Unlink(p.cursorPath); err != nil && err != syscall.ENOENT {
			return fail(&fs.PathError{Op: "unlink", Path: p.cursorPath, Err: err})
		}
	} else if replaced, err := s.putCursor(p, ip); err != nil {
		return fail(err)
	} else if replaced {
		h.netChanged = true
	}
	if err := s.syncDir(); err != nil {
		return fail(err)
	}
	return nil
}

// putCursor writes ip to p's cursor file, under the lock. Without Sync it
// writes over the file in place where that is safe (see overwrite), as
// host-local rewrites it, which creates no inode and changes no directory.
// Otherwise (no file yet, a longer old content, not a regular file, and always
// with Sync) it writes a temporary file, fsynced with Sync, and renames it over
// the cursor file, and reports that it changed the directory. The caller
// fsyncs the directory.
func (s *Store) putCursor(p *pool, ip netip.Addr) (replaced bool, err error) {
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")]byte
	data := ip.AppendTo(buf[:0])
	if !s.sync && s.overwrite(p, data) {
		return false, nil
	}
	tmp, fd, err := s.writeTemp(data, time.Time{})
	if err != nil {
		return true, err
	}
	if err := retryEINTR(func() error { return syscall.Rename(tmp, p.cursorPath) }); err != nil {
		syscall.Close(fd)
		syscall.Unlink(tmp)
		return true, &os.LinkError{Op: "rename", Old: tmp, New: p.cursorPath, Err: err}
	}
	s.forgetCursor(p)
	if s.sync {
		syscall.Close(fd)
	} else {
		p.cursorFd = fd // the cursor file now, to write over next time
	}
	return true, nil
}

// overwrite writes data over the start of p's cursor file, as host-local
// rewrites last_reserved_ip: no new inode, no directory change. It does so only
// where that leaves no moment at which the file holds anything but its old
// content or data, and reports whether it did: the file exists, is a regular
// file, and is no longer than data (a single small write(2) is whole or absent
// after a crash; a longer file would need a truncation, with a moment empty or
// holding data followed by the old content's tail). A failed write may leave
// part of data over the old content; the caller then replaces the file.
//
// It keeps the file open in p.cursorFd for the next write, and opens it again
// by name if it has been removed or replaced by rename since (by SetCursor of
// a shorter address, or another program).
func (s *Store) overwrite(p *pool, data []byte) bool {
	var st syscall.Stat_t
	for cached := p.cursorFd >= 0; ; cached = false {
		if p.cursorFd < 0 {
			fd, err := openFile(p.cursorPath, syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return false
			}
			p.cursorFd = fd
		}
		err := retryEINTR(func() error { return syscall.Fstat(p.cursorFd, &st) })
		if err == nil && st.Nlink > 0 && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			break
		}
		s.forgetCursor(p)
		if !cached {
			return false
		}
		// Removed or replaced since this Store wrote it: open the file
		// that has the name now.
	}
	if st.Size > int64(len(data)) {
		return false
	}
	for n := 0; n < len(data); {
		m, err := syscall.Pwrite(p.cursorFd, data[n:], int64(n))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return false
		}
		n += m
	}
	return true
}

// forgetCursor closes the cursor file kept open for p, if any.
func (s *Store) forgetCursor(p *pool) {
	if p.cursorFd >= 0 {
		syscall.Close(p.cursorFd)
		p.cursorFd = -1
	}
}
