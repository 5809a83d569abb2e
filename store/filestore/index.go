//go:build linux

package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The owner index: one symbolic link per container ID that holds claims, in a
// directory outside the network directory, whose target lists the addresses
// of that container's claim files (see the package documentation, Owners).
const (
	// indexParent is the directory, next to the network directory in its
	// data directory, that holds the index of every network. A CNI network
	// name cannot start with a dot.
	indexParent = ".ipam-owners"
	// stateName is the index's state: a symbolic link whose target says
	// when and for which directory the index is complete.
	stateName = ".state"
	// stateVersion starts the state's target.
	stateVersion = "ipam-owner-index/1"
	// hashPrefix starts the name of an entry whose container ID is not a
	// plain file name; a safe ID never starts with it.
	hashPrefix = "_"
	// maxSafeID is the longest container ID used as an entry's name as it is.
	maxSafeID = 128
	// maxTarget is the longest list of addresses an entry holds (symbolic
	// link targets stop at 4095 bytes); a longer one is written as overflow.
	maxTarget = 4000
	// overflow is the target of an entry whose addresses do not fit: its
	// container's claims are found by reading every claim file.
	overflow = "*"
	// markBase is the modification time, in seconds since 1970, around which
	// the index sets both directories' modification times (2001-09-09
	// 01:46:40 UTC): a change to a directory sets its modification time to
	// the current time, which is never this far in the past.
	markBase = 1_000_000_000
)

// Steps of the writes, at which a test may stop a process (see hook).
const (
	stepLocked       = "locked"
	stepEntryAdded   = "index entry added"
	stepPublished    = "claim published"
	stepCursor       = "cursor written"
	stepRemoved      = "claim removed"
	stepEntryDropped = "index entry removed"
	stepReplaced     = "claim replaced"
	stepEntries      = "rebuild: entries written"
	stepState        = "rebuild: state written"
	stepMarked       = "directories marked"
	// stepRead is not a step of a write: every file read calls the hook
	// with it, so that tests count what a call reads.
	stepRead = "file read"
)

// steps lists every step, in no particular order.
var steps = []string{stepLocked, stepEntryAdded, stepPublished, stepCursor, stepRemoved,
	stepEntryDropped, stepReplaced, stepEntries, stepState, stepMarked}

// indexState is what .state records: the boot and the network directory the
// index was built for, and the modification times the index set on the
// network directory and on its own directory when it was last complete.
type indexState struct {
	boot     string
	dev, ino uint64 // the network directory
	idxIno   uint64 // the index directory
	net, idx int64  // nanoseconds since 1970
}

// String returns the state's target.
func (st *indexState) String() string {
	return fmt.Sprintf("%s boot=%s dir=%d:%d index=%d mtime=%d,%d", stateVersion, st.boot, st.dev, st.ino, st.idxIno, st.net, st.idx)
}

// parseState parses a state's target; it returns why it cannot.
func parseState(target string) (*indexState, string) {
	f := strings.Fields(target)
	if len(f) != 5 || f[0] != stateVersion {
		return nil, fmt.Sprintf("target %q is not %s state", target, stateVersion)
	}
	st := &indexState{}
	var ok bool
	st.boot, ok = strings.CutPrefix(f[1], "boot=")
	dir, ok2 := strings.CutPrefix(f[2], "dir=")
	dev, ino, ok3 := strings.Cut(dir, ":")
	idx, ok4 := strings.CutPrefix(f[3], "index=")
	mt, ok5 := strings.CutPrefix(f[4], "mtime=")
	net, idxT, ok6 := strings.Cut(mt, ",")
	var errs [5]error
	st.dev, errs[0] = strconv.ParseUint(dev, 10, 64)
	st.ino, errs[1] = strconv.ParseUint(ino, 10, 64)
	st.idxIno, errs[2] = strconv.ParseUint(idx, 10, 64)
	st.net, errs[3] = strconv.ParseInt(net, 10, 64)
	st.idx, errs[4] = strconv.ParseInt(idxT, 10, 64)
	if !(ok && ok2 && ok3 && ok4 && ok5 && ok6) || errors.Join(errs[:]...) != nil {
		return nil, fmt.Sprintf("target %q is not %s state", target, stateVersion)
	}
	return st, ""
}

// bootID is the running kernel's boot ID, or "" if it cannot be read.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// indexDir returns where the index of the network directory dir lives by
// default: .ipam-owners/<network name> in the directory that holds dir,
// symbolic links resolved, so that every Store of one directory finds one
// index.
func indexDir(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return "", err
	}
	parent, name := filepath.Split(real)
	if name == "" || parent == "" {
		return "", fmt.Errorf("options.indexDir is empty and %s has no parent directory to hold %s: set it", real, indexParent)
	}
	return filepath.Join(parent, indexParent, name), nil
}

// checkIndexDir reports why idx cannot hold the index of the network
// directory dir: it is inside it, where host-local reads every file.
func checkIndexDir(dir, idx string) error {
	d, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	i, err := filepath.Abs(idx)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(d, i); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("options.indexDir %q is inside the network directory %q, whose every file host-local reads", idx, dir)
	}
	return nil
}

// entryName returns the name of container id's entry in the index directory:
// the ID itself when it is a plain name (as CNI container IDs are), else
// "_" and the SHA-256 of the ID in hex.
func entryName(id string) string {
	if len(id) <= maxSafeID && safeName(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// safeName reports whether s matches ^[A-Za-z0-9][A-Za-z0-9_.-]*$, the
// pattern of CNI container IDs and network names.
func safeName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return s != ""
}

// entry is a container's entry in the index, as read.
type entry struct {
	name   string
	ips    []netip.Addr
	all    bool   // overflow: the container's claims are in no list
	exists bool   // the link exists
	bad    string // why the entry is corrupt, or ""
}

// entryPath returns the path of the index entry name.
func (s *Store) entryPath(name string) string { return s.idxDir + "/" + name }

// readEntry reads the entry called name. An absent entry is not an error.
func (s *Store) readEntry(name string) (entry, error) {
	e := entry{name: name}
	path := s.entryPath(name)
	var buf [4096]byte
	n, err := readlink(path, buf[:])
	switch {
	case err == syscall.ENOENT:
		return e, nil
	case err == syscall.EINVAL:
		e.exists, e.bad = true, "not a symbolic link"
		return e, nil
	case err != nil:
		return e, &fs.PathError{Op: "readlink", Path: path, Err: err}
	}
	e.exists = true
	if n == len(buf) {
		e.bad = fmt.Sprintf("target longer than %d bytes", maxTarget)
		return e, nil
	}
	e.ips, e.all, e.bad = parseTarget(string(buf[:n]))
	return e, nil
}

// parseTarget parses an entry's target: the addresses it lists, or all for
// an overflow, or why it is corrupt.
func parseTarget(target string) (ips []netip.Addr, all bool, bad string) {
	if target == overflow {
		return nil, true, ""
	}
	for part := range strings.SplitSeq(target, ",") {
		ip, err := netip.ParseAddr(part)
		if err != nil || ip.Zone() != "" || ip.Is4In6() || ip.String() != part {
			return nil, false, fmt.Sprintf("target %q: %q is not an address in canonical form", target, part)
		}
		ips = append(ips, ip)
	}
	return ips, false, ""
}

// entryTarget returns the target of an entry listing ips, which are sorted.
func entryTarget(ips []netip.Addr) string {
	var b []byte
	for i, ip := range ips {
		if i > 0 {
			b = append(b, ',')
		}
		b = ip.AppendTo(b)
		if len(b) > maxTarget {
			return overflow
		}
	}
	return string(b)
}

// hold is one hold of the lock by a call that reads the index or writes:
// whether the index was complete when it began, and what the call changed.
type hold struct {
	// valid: the index was complete, and the directories marked, when the
	// hold began (or since a rebuild in it): the call marks them again
	// after its changes.
	valid bool
	// complete: every claim file has its entry now (valid, or rebuilt in
	// this hold even if the marks could not be set).
	complete bool
	// why the index was not valid, for the log.
	why string
	// netChanged and idxChanged: the call changed the network directory or
	// the index directory, whose marks it sets again at the end.
	netChanged, idxChanged bool
	// stale: an index update failed or found a corrupt entry: the marks stay
	// off, so that the next call that needs the index rebuilds it.
	stale bool
	// read is the entry this hold last read and left as it is on disk, if
	// any, so that a write after a read does not read it again.
	read *entry
}

// begin takes the lock and checks the index.
func (s *Store) begin(ctx context.Context) (*hold, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	s.step(stepLocked)
	h := &hold{}
	_, h.why = s.indexValid()
	h.valid = h.why == ""
	h.complete = h.valid
	return h, nil
}

// end marks the directories again if the hold began with a valid index and
// changed them, then releases the lock.
func (s *Store) end(h *hold) {
	if h.valid && !h.stale && (h.netChanged || h.idxChanged) {
		if err := s.mark(s.state.Load(), h.netChanged, h.idxChanged); err != nil {
			s.warnMark(err)
		} else {
			s.step(stepMarked)
		}
	}
	s.unlock()
}

// ensure rebuilds the index under h if it is not complete.
func (s *Store) ensure(ctx context.Context, h *hold) error {
	if h.complete && !h.stale {
		return nil
	}
	why := h.why
	if h.stale {
		why = "an index entry was found corrupt"
	}
	marked, err := s.rebuild(ctx, why)
	if err != nil {
		return err
	}
	h.complete, h.valid, h.stale = true, marked, false
	h.netChanged, h.idxChanged, h.read = false, false, nil
	return nil
}

// indexValid reports why the index cannot be believed, or "" and the state
// if it can: the state is this boot's and names the network directory, and
// both directories still carry the modification times it records, so that
// nothing has changed either since a Store last brought the index up to
// date. It reads .state again when the state this Store holds does not
// match, as after another Store's rebuild. It takes no lock.
func (s *Store) indexValid() (*indexState, string) {
	st := s.state.Load()
	if st != nil && s.marked(st) == "" {
		return st, ""
	}
	fresh, why := s.readState()
	if fresh == nil {
		return nil, why
	}
	if st == nil || *fresh != *st {
		s.state.Store(fresh)
	}
	if why := s.marked(fresh); why != "" {
		return nil, why
	}
	return fresh, ""
}

// readState reads .state, or says why there is none to believe.
func (s *Store) readState() (*indexState, string) {
	path := s.entryPath(stateName)
	var buf [256]byte
	n, err := readlink(path, buf[:])
	switch {
	case err == syscall.ENOENT:
		return nil, "there is no index yet (" + path + " is missing)"
	case err == syscall.EINVAL:
		s.log.Warn("filestore: owner index state is not a symbolic link; rebuilding", "file", path)
		return nil, path + " is not a symbolic link"
	case err != nil:
		return nil, fmt.Sprintf("%s: %v", path, err)
	}
	st, bad := parseState(string(buf[:n]))
	if st == nil {
		s.log.Warn("filestore: owner index state is corrupt; rebuilding", "file", path, "problem", bad)
		return nil, path + ": " + bad
	}
	return st, ""
}

// marked reports why st does not hold now, or "".
func (s *Store) marked(st *indexState) string {
	if st.boot != s.boot {
		return fmt.Sprintf("the index was built in another boot (%q, now %q)", st.boot, s.boot)
	}
	var net, idx syscall.Stat_t
	fds := s.dirs.Load()
	if err := retryEINTR(func() error { return syscall.Fstat(fds.net, &net) }); err != nil {
		return fmt.Sprintf("fstat %s: %v", s.dir, err)
	}
	if err := retryEINTR(func() error { return syscall.Fstat(fds.idx, &idx) }); err != nil {
		return fmt.Sprintf("fstat %s: %v", s.idxDir, err)
	}
	switch {
	case net.Nlink == 0 || uint64(net.Dev) != st.dev || net.Ino != st.ino:
		return "the network directory " + s.dir + " was removed or replaced"
	case idx.Nlink == 0 || idx.Ino != st.idxIno:
		return "the index directory " + s.idxDir + " was removed or replaced"
	case net.Mtim.Nano() != st.net:
		return "the network directory changed since the index was last brought up to date (a write by host-local or another program, or a writer that died)"
	case idx.Mtim.Nano() != st.idx:
		return "the index directory changed since the index was last brought up to date (by another program, or a writer that died)"
	}
	return ""
}

// mark sets the modification times st records on the network directory (if
// net) and on the index directory (if idx).
func (s *Store) mark(st *indexState, net, idx bool) error {
	fds := s.dirs.Load()
	if net {
		if err := futimens(fds.net, time.Unix(0, st.net)); err != nil {
			return &fs.PathError{Op: "futimens", Path: s.dir, Err: err}
		}
	}
	if idx {
		if err := futimens(fds.idx, time.Unix(0, st.idx)); err != nil {
			return &fs.PathError{Op: "futimens", Path: s.idxDir, Err: err}
		}
	}
	return nil
}

// warnMark logs, once per Store, that the directories cannot be marked: the
// index is then rebuilt by every call that needs it.
func (s *Store) warnMark(err error) {
	s.markWarn.Do(func() {
		s.log.Warn("filestore: cannot mark the directories as indexed; every owner query will read every claim file", "error", err)
	})
}

// rebuild builds the index from every claim file of the network directory,
// under the lock, rewriting only the entries that differ, removes the
// temporary files a writer that died left in either directory, writes .state
// and marks the directories. It reports whether the marks are set.
func (s *Store) rebuild(ctx context.Context, why string) (marked bool, err error) {
	start := time.Now()
	if err := s.reopenDirs(); err != nil {
		return false, err
	}
	claims := map[string][]netip.Addr{}
	files, n := 0, 0
	var buf [maxFileSize + 1]byte
	err = s.walk(s.dir, func(name string) error {
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if n%ProgressEvery == 0 {
			s.progress(n, 0, "claim files")
		}
		if strings.HasPrefix(name, tmpPrefix) {
			if err := syscall.Unlink(s.path(name)); err != nil && err != syscall.ENOENT {
				return &fs.PathError{Op: "unlink", Path: s.path(name), Err: err}
			}
			return nil
		}
		ip, badName, ok := claimName(name)
		if !ok || badName != "" {
			return nil
		}
		data, err := s.readAt(name, &buf)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case data == nil:
			return nil // not a regular file, or too large: corrupt
		}
		owner, bad := parseContent(data)
		if bad != "" {
			return nil // corrupt: nobody's claim
		}
		files++
		claims[owner.ContainerID] = append(claims[owner.ContainerID], ip)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("owner index: rebuilding from %s: %w", s.dir, err)
	}

	existing := map[string]bool{}
	err = s.walk(s.idxDir, func(name string) error {
		switch {
		case name == stateName:
		case strings.HasPrefix(name, tmpPrefix):
			if err := syscall.Unlink(s.entryPath(name)); err != nil && err != syscall.ENOENT {
				return &fs.PathError{Op: "unlink", Path: s.entryPath(name), Err: err}
			}
		default:
			existing[name] = true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("owner index: %w", err)
	}
	written, done := 0, 0
	var link [4096]byte
	for id, ips := range claims {
		if done++; done%ProgressEvery == 0 {
			s.progress(done, len(claims), "owners")
		}
		name := entryName(id)
		e := entry{name: name}
		if existing[name] {
			// Entries are written sorted: one that lists the same
			// addresses has the same target.
			slices.SortFunc(ips, netip.Addr.Compare)
			n, err := readlink(s.entryPath(name), link[:])
			if err == nil && n < len(link) && string(link[:n]) == entryTarget(ips) {
				delete(existing, name)
				continue
			}
			if e, err = s.readEntry(name); err != nil {
				return false, fmt.Errorf("owner index: %w", err)
			}
			if e.bad != "" {
				s.log.Warn("filestore: owner index entry is corrupt; rewriting it", "file", s.entryPath(name), "problem", e.bad)
			}
			delete(existing, name)
		}
		if err := s.writeEntry(e, ips); err != nil {
			return false, fmt.Errorf("owner index: %w", err)
		}
		written++
	}
	for name := range existing {
		switch err := syscall.Unlink(s.entryPath(name)); err {
		case nil, syscall.ENOENT:
		case syscall.EISDIR, syscall.EPERM:
			// A directory, which is no entry: left to whoever made it.
			s.log.Warn("filestore: the owner index directory holds something that is no entry; leaving it", "file", s.entryPath(name))
		default:
			return false, fmt.Errorf("owner index: %w", &fs.PathError{Op: "unlink", Path: s.entryPath(name), Err: err})
		}
	}
	s.step(stepEntries)

	marked, err = s.newState()
	if err != nil {
		return false, fmt.Errorf("owner index: %w", err)
	}
	s.log.Info("filestore: owner index rebuilt", "dir", s.dir, "index", s.idxDir, "reason", why,
		"claims", files, "owners", len(claims), "written", written, "removed", len(existing), "took", time.Since(start))
	return marked, nil
}

// reopenDirs opens the network and index directories again if the names
// now lead elsewhere than the descriptors this Store holds (the directories
// were removed and made again), creating the index directory if missing.
func (s *Store) reopenDirs() error {
	if err := os.MkdirAll(s.idxDir, 0o700); err != nil {
		return err
	}
	old := s.dirs.Load()
	fds := *old
	for _, d := range []struct {
		path string
		fd   *int
	}{{s.dir, &fds.net}, {s.idxDir, &fds.idx}} {
		var byName, byFd syscall.Stat_t
		if err := syscall.Stat(d.path, &byName); err != nil {
			return &fs.PathError{Op: "stat", Path: d.path, Err: err}
		}
		if err := syscall.Fstat(*d.fd, &byFd); err == nil && byName.Dev == byFd.Dev && byName.Ino == byFd.Ino {
			continue
		}
		fd, err := openFile(d.path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.retired = append(s.retired, *d.fd) // a reader may still use it
		*d.fd = fd
	}
	if fds != *old {
		s.dirs.Store(&fds)
	}
	return nil
}

// dirFds are the open network and index directories.
type dirFds struct{ net, idx int }

// newState writes a new .state for this boot and marks both directories
// with new modification times, which it reads back (a filesystem may keep
// them coarser) and writes again if they differ from what it asked for. It
// reports whether the marks are set.
func (s *Store) newState() (bool, error) {
	var net, idx syscall.Stat_t
	fds := s.dirs.Load()
	if err := syscall.Fstat(fds.net, &net); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: s.dir, Err: err}
	}
	if err := syscall.Fstat(fds.idx, &idx); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: s.idxDir, Err: err}
	}
	st := &indexState{boot: s.boot, dev: uint64(net.Dev), ino: net.Ino, idxIno: idx.Ino,
		net: markBase*1e9 + rand.Int64N(1e9), idx: markBase*1e9 + rand.Int64N(1e9)}
	for range 2 {
		if err := s.replaceLink(stateName, st.String()); err != nil {
			return false, err
		}
		s.state.Store(st)
		s.step(stepState)
		if err := s.mark(st, true, true); err != nil {
			s.warnMark(err)
			return false, nil
		}
		if err := syscall.Fstat(fds.net, &net); err != nil {
			return false, &fs.PathError{Op: "fstat", Path: s.dir, Err: err}
		}
		if err := syscall.Fstat(fds.idx, &idx); err != nil {
			return false, &fs.PathError{Op: "fstat", Path: s.idxDir, Err: err}
		}
		if net.Mtim.Nano() == st.net && idx.Mtim.Nano() == st.idx {
			s.step(stepMarked)
			return true, nil
		}
		// The filesystem keeps times coarser: record what it kept.
		next := *st
		next.net, next.idx = net.Mtim.Nano(), idx.Mtim.Nano()
		st = &next
	}
	s.warnMark(fmt.Errorf("%s and %s do not keep the modification times set on them", s.dir, s.idxDir))
	return false, nil
}

// replaceLink makes the index entry name a symbolic link to target, in one
// step that a reader sees whole: a new link under a temporary name, renamed
// over the old.
func (s *Store) replaceLink(name, target string) error {
	for attempt := 0; ; attempt++ {
		tmp := s.entryPath(tmpPrefix + strconv.FormatUint(rand.Uint64(), 36))
		err := retryEINTR(func() error { return syscall.Symlink(target, tmp) })
		if err == syscall.EEXIST && attempt < 10 {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "symlink", Old: target, New: tmp, Err: err}
		}
		if err := retryEINTR(func() error { return syscall.Rename(tmp, s.entryPath(name)) }); err != nil {
			syscall.Unlink(tmp)
			return &os.LinkError{Op: "rename", Old: tmp, New: s.entryPath(name), Err: err}
		}
		return nil
	}
}

// writeEntry makes e list ips, which it sorts: a new link if it does not
// exist, no link if ips is empty, else a link replaced whole.
func (s *Store) writeEntry(e entry, ips []netip.Addr) error {
	slices.SortFunc(ips, netip.Addr.Compare)
	path := s.entryPath(e.name)
	switch {
	case len(ips) == 0:
		if !e.exists {
			return nil
		}
		if err := syscall.Unlink(path); err != nil && err != syscall.ENOENT {
			return &fs.PathError{Op: "unlink", Path: path, Err: err}
		}
		return nil
	case !e.exists:
		err := retryEINTR(func() error { return syscall.Symlink(entryTarget(ips), path) })
		if err != syscall.EEXIST {
			if err != nil {
				return &os.LinkError{Op: "symlink", Old: entryTarget(ips), New: path, Err: err}
			}
			return nil
		}
		// Made since it was read, by a writer that does not lock: replace it.
	}
	return s.replaceLink(e.name, entryTarget(ips))
}

// addEntry records, under h, that container id may hold ip: before its claim
// file is published.
func (s *Store) addEntry(h *hold, id string, ip netip.Addr) error {
	e, err := h.entry(s, entryName(id))
	if err != nil {
		return err
	}
	if e.bad != "" {
		s.log.Warn("filestore: owner index entry is corrupt; the index will be rebuilt", "file", s.entryPath(e.name), "problem", e.bad)
		h.stale = true
	}
	if e.all || slices.Contains(e.ips, ip) {
		return nil
	}
	h.idxChanged, h.read = true, nil
	return s.writeEntry(e, append(e.ips, ip))
}

// entry returns the index entry name, as this hold last read it or from disk.
func (h *hold) entry(s *Store, name string) (entry, error) {
	if h.read != nil && h.read.name == name {
		return *h.read, nil
	}
	return s.readEntry(name)
}

// dropEntry records, under h, that container id no longer holds ip: after
// its claim file is gone. A failure leaves an entry too many, which readers
// ignore; it is not reported.
func (s *Store) dropEntry(h *hold, id string, ip netip.Addr) {
	e, err := s.readEntry(entryName(id))
	switch {
	case err != nil:
		s.log.Warn("filestore: cannot read an owner index entry; it keeps an address no longer held", "file", s.entryPath(entryName(id)), "error", err)
		return
	case e.bad != "":
		s.log.Warn("filestore: owner index entry is corrupt; the index will be rebuilt", "file", s.entryPath(e.name), "problem", e.bad)
		h.stale = true
		return
	case e.all || !slices.Contains(e.ips, ip):
		return
	}
	h.idxChanged, h.read = true, nil
	if err := s.writeEntry(e, slices.DeleteFunc(e.ips, func(x netip.Addr) bool { return x == ip })); err != nil {
		s.log.Warn("filestore: cannot update an owner index entry; it keeps an address no longer held", "file", s.entryPath(e.name), "error", err)
	}
}

// step calls the test hook, if any, at a step of a write.
func (s *Store) step(name string) {
	if s.hook != nil {
		s.hook(name)
	}
}
