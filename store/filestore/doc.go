// Package filestore is a store.Store that keeps claims in host-local's on-disk
// format, byte for byte: an existing /var/lib/cni/networks/<name> directory is
// read as it is, and host-local v1.9.1 reads what this package writes. It is for
// Linux.
//
// # Format
//
// A Store owns one network directory, <dataDir>/<network name>, created with mode
// 0755 if missing. In it:
//
//   - one file per claimed address, named ip.String() ("10.1.2.2",
//     "2001:db8:1::2"), mode 0600, holding "<containerID>\r\n<ifname>" with no
//     trailing newline ("example\r\ndummy0" is 15 bytes). A claim without an
//     interface is written as just "<containerID>", host-local's legacy form
//     from before September 2018;
//   - last_reserved_ip.<index>, mode 0600, holding ip.String() with no newline:
//     the cursor (store.Cursors) of the pool with that Index, host-local's
//     range-set index;
//   - lock, empty, mode 0750: the file that flock(2) locks.
//
// Files are read as host-local reads them: the content with surrounding
// whitespace trimmed (strings.TrimSpace) is "<containerID>\r\n<ifname>" or, in
// the legacy form, "<containerID>", which reads as a claim with an empty
// Interface. Files whose names are not IP addresses (lock, last_reserved_ip.*,
// this package's temporary files, anything else) are not claims.
//
// A directory holds one network's address space, so every address has one file
// and belongs to at most one pool: Options.Pools maps pool names onto the
// directory by disjoint prefixes, and a claim is listed under the pool whose
// prefixes contain its address. Pools of different networks live in different
// directories, each its own Store.
//
// # Owners
//
// host-local identifies an owner by its container ID and interface name, and its
// format has room for nothing else. Create and Update therefore store
// Owner.ContainerID and Owner.Interface only, and refuse a claim whose owner has
// no container ID or carries a UID, namespace, name or the Stable flag, with an
// error wrapping ErrUnsupportedOwner that names the field: a store that dropped
// them silently would hand a pod's claims back under another identity after a
// reload. Both fields must be valid UTF-8 without whitespace or control
// characters, which host-local's own rules (the container ID pattern, the
// interface name checks) already guarantee.
//
// A claim's Time is its file's modification time: Create and Update set it from
// Claim.Time (to the nanosecond, as far as the filesystem keeps it), or leave the
// time of the write if Claim.Time is zero. Files written by host-local carry the
// time host-local wrote them.
//
// # Revisions
//
// A file's revision is a 63-bit hash of its identity and state as fstat(2) and
// the FS_IOC_GETVERSION ioctl report them: device, inode number, inode
// generation, change time, modification time and size. Nothing else is stored,
// so the format stays host-local's. Every write of a claim creates a new inode
// (Create links a new file in, Update renames a new file over the old one while
// holding the old one open, so the two inode numbers differ), and any change to
// a file, by this package or another program, changes its change time, so the
// revision changes on every write. After a Delete the inode number may be reused
// for a new claim at the same name (ext4 and xfs reuse freed inodes at once);
// the revision still differs because the filesystem gives the reused inode a
// new random generation (ext4, xfs), or does not reuse inode numbers promptly
// (tmpfs, btrfs), and because the change time has moved on. On a filesystem
// without generations, with coarse timestamps, that reuses inode numbers at
// once, a claim deleted and created again within one timestamp tick, with the
// same Time and the same content size, could get its old revision back: a
// stale Update or Delete could then act on the new claim. Revisions are not
// ordered; compare them for equality only.
//
// # Locking and concurrency
//
// A Store is safe for concurrent use by goroutines, and by separate processes
// (other Stores, host-local itself) on one directory. Every write takes
// flock(LOCK_EX) on the lock file, as host-local does, and checks revisions under
// it. Reads of claims do not take the lock: this package names a claim file
// only once it is complete (see Writes), so a reader sees a whole file or none.
// A read that finds a file in the middle of a write (an empty file that
// host-local has created but not yet written, or a new claim still linked to
// its temporary name) reads it again under the lock. The cursor file is
// rewritten in place, by host-local and by this package, so Cursor reads it
// under the lock, as host-local does. Locks are per host: the directory must
// not be shared over a network filesystem.
//
// # Writes
//
// Create and CreateAndSetCursor write a claim file as one new inode with one
// directory entry. Without Options.Sync, the file is created unnamed (open(2)
// with O_TMPFILE on the directory), written, given its time, and named with
// linkat(2), which fails if the address is taken. Where the filesystem or
// kernel has no O_TMPFILE, or will not link one (linkat with AT_EMPTY_PATH
// needs CAP_DAC_READ_SEARCH before Linux 6.10, and /proc/self/fd is the
// fallback), and always with Sync, the file is written under a temporary name
// ".tmp-<random>" in the directory, linked to the address's name, and the
// temporary name removed. Update writes a temporary file and renames it over
// the claim.
//
// SetCursor and CreateAndSetCursor write last_reserved_ip.<Index> over its
// content in place with one pwrite(2), as host-local rewrites it (no new inode,
// no directory change), when the new address is at least as long as what the
// file holds. A shorter address, a missing file, anything but a regular file,
// and every cursor write with Sync replace the file by rename(2) of a
// temporary file instead. Without Sync, a Store keeps the cursor file it last
// wrote open, and opens it again by name when it finds it removed or replaced
// (its link count is zero). CreateAndSetCursor does the claim and the cursor
// under one hold of the lock, and with Sync one fsync of the directory for
// both.
//
// # Crash safety
//
// No claim file is ever empty or partial, even if the process dies at any
// instant: a claim file gets its name only once it is complete, and Update
// renames a complete file over the claim. An unnamed file of a process that
// dies is freed by the kernel; a temporary file left by a crash is never read
// as a claim, and Open removes it. Nor does this package ever leave a cursor
// file empty or holding a mix of two addresses: it writes over the old content
// only with a single small write(2) of content at least as long, which a dying
// process either completes or does not start, and replaces the file whole
// otherwise. (host-local truncates the cursor file, then writes it; an empty
// cursor file, which a host-local that died in between leaves, reads as no
// cursor, as host-local reads it.)
//
// With Options.Sync, files and the directory are also fsynced on every write,
// so that a write that returned survives a power loss; without it, a process
// crash loses nothing that returned, but a power loss may lose recent writes,
// leave an empty claim file, which then reads as corrupt, or leave a cursor
// file empty or torn, which only changes where the next search starts.
//
// # Corrupt files
//
// A file named as an address of a pool whose content is not a claim (an empty
// file, which a crashed host-local leaves behind; more than two lines; invalid
// UTF-8; not a regular file; a name in non-canonical form) is corrupt. Its
// address stays taken: Create of it fails with store.ErrExists, as host-local
// skips it too. Get of it returns a *CorruptError. List returns every claim it
// could read and, with them, an error that joins one *CorruptError per corrupt
// file, each naming the file and the problem and carrying the file's revision,
// so that a repair tool can Delete or Update it through the usual revision
// check. A caller that can do without those addresses may use the claims List
// returned with such an error; errors.Is(err, ErrCorrupt) tells that apart
// from a failure to read the directory, after which List returns no claims.
//
// # Cost
//
// Get, Create, Update, Delete, Cursor and SetCursor touch only the files they
// name: their cost does not grow with the number of claims. List reads the
// directory and every file of the pool; it is the load path. Without Sync, a
// CreateAndSetCursor that succeeds makes 11 system calls: flock(2) twice; for
// the claim file open, write, utimensat, linkat, fstat, the FS_IOC_GETVERSION
// ioctl and close; for the cursor fstat and pwrite. It creates one inode,
// frees none, and changes the directory once. On ext4 without a journal the
// new inode is most of the cost: the inode allocator skips, one by one, the
// inodes freed in the last minutes.
package filestore
