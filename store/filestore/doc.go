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
// it. Reads do not take the lock: this package publishes every file atomically
// (link(2) or rename(2) of a complete temporary file), so a reader sees a whole
// file or none. A read that finds a file in the middle of a write (an empty
// file that host-local has created but not yet written, or a new claim still
// linked to its temporary name) reads it again under the lock. Locks are per
// host: the directory must not be shared over a network filesystem.
//
// # Crash safety
//
// No claim file is ever empty or partial, even if the process dies at any
// instant: Create writes the content to a temporary file named ".tmp-<random>"
// in the same directory, sets its time, and publishes it with link(2), which
// fails if the address is taken; Update renames a complete temporary file over
// the claim. Temporary files left by a crash are never read as claims, and Open
// removes them. With Options.Sync, files and the directory are also fsynced on
// every write, so that a write that returned survives a power loss; without it,
// a process crash loses nothing that returned, but a power loss may lose recent
// writes or leave an empty file, which then reads as corrupt.
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
// directory and every file of the pool; it is the load path.
package filestore
