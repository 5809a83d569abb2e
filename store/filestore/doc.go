// Package filestore is a store.Store that keeps claims in host-local's on-disk
// format, byte for byte: an existing /var/lib/cni/networks/<name> directory is
// read as it is, and host-local v1.9.1 reads what this package writes. It is for
// Linux.
//
// # Use it
//
// From a host-local network config (package hostlocal):
//
//	c, err := hostlocal.Load(netconf, os.Getenv("CNI_ARGS"))
//	pools, err := hostlocal.FileStorePools(c.Pools) // pool i is range set i
//	st, err := filestore.Open(c.StateDir(), filestore.Options{Pools: pools})
//	defer st.Close()
//	cat, err := ipam.NewCatalog(c.Pools...)
//	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
//	res, err := alloc.Allocate(ctx, ipam.Request{ContainerID: containerID,
//		Interfaces: []ipam.NIC{{Name: ifname, Pools: c.PoolNames()}}})
//
// The owner rule, up front: host-local's files record a container ID and an
// interface name, nothing else. Owners are therefore identified by
// ContainerID (and Interface) only: a Request or Owner that carries a pod UID,
// a namespace and name, or Stable is refused by Create with an error wrapping
// ErrUnsupportedOwner (see Owners below). Release with
// store.Owner{ContainerID: id}.
//
// Everything below is how the directory is laid out and kept safe.
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
// Nothing else is ever in the network directory, except temporary files that
// exist only while this package holds the lock (see Writes). The owner index
// (see Owners) lives next to it, outside it: by default in
// <dataDir>/.ipam-owners/<network name>.
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
// Owned answers by container ID only (store.ByContainer, narrowed by interface
// or not); a query by UID or by name has no claims, since the format cannot
// hold them. A claim in the legacy form names no interface and is found for
// every interface of its container. CreateExclusive (store.ExclusiveCreator)
// checks the container's claims in the Store's pools and creates in one hold
// of the lock, so that of two Stores, in two processes, serving one container
// at once, one creates and the other gets a *store.HeldError.
//
// # The owner index
//
// Owned and CreateExclusive find a container's claims through an owner index,
// instead of reading every claim file as host-local does. host-local v1.9.1
// may run side by side on the same network directory (during a rollout) and
// knows nothing of it: every host-local call walks the network directory
// recursively, reads every regular file in it, and on DEL removes those that
// hold "<id>\r\n<ifname>". So nothing of the index is inside the network
// directory: it lives in Options.IndexDir, by default .ipam-owners/<network
// name> in the directory that holds the network directory (symbolic links in
// its path resolved), that is <dataDir>/.ipam-owners/<name>, created with mode
// 0700. A CNI network name matches ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, so no
// network is ever called .ipam-owners. It holds symbolic links, written whole
// (symlink(2), or a new link renamed over the old) and read whole
// (readlink(2)), so that a reader never sees part of one; a short target takes
// no data block:
//
//   - <containerID>: the container's entry, a link whose target lists the
//     addresses of the claim files the container may hold, sorted, in
//     ip.String() form, separated by commas: "10.1.2.2,2001:db8:1::2". There
//     is one entry per container that holds claims, whatever their
//     interfaces; a container that holds none has none. A container ID that
//     is not a plain name (^[A-Za-z0-9][A-Za-z0-9_.-]*$, at most 128 bytes;
//     CNI container IDs are) is named "_" and the SHA-256 of the ID in hex. A
//     list longer than 4,000 bytes (about 100 IPv6 addresses) is written
//     "*": that container's claims are then found by reading every claim
//     file, until it holds fewer.
//   - .state: a link whose target is "ipam-owner-index/1 boot=<boot ID>
//     dir=<device>:<inode> index=<inode> mtime=<ns>,<ns>": the boot and the
//     network directory the index was built for, the index directory's
//     inode, and the two directories' marks (below).
//   - .tmp-<random>: a new link before it is renamed over an entry, made and
//     renamed under the lock.
//
// The claim files stay the truth. An entry only says which claim files to
// read: each address it lists is believed only if its claim file exists and
// holds the container's ID, and an address whose file is gone, corrupt or
// another container's is left out of the answer and removed from the entry
// under the lock. The index may thus list too much, never too little, for the
// writes of this package: a Create adds the address to its container's entry
// before it publishes the claim file, a Delete removes it after the claim
// file is gone, and an Update adds it to the new container's entry first and
// removes it from the old one's last.
//
// Other programs do not update the index: host-local, an older version of
// this package, an administrator. Their releases only remove claim files,
// which reading the entries catches; their reservations add claim files that
// no entry lists. So a Store believes the index only while it knows that no
// one else has changed either directory since a Store last brought the index
// up to date, by marks that any change erases:
//
//   - A write of this package that changes the network directory or the
//     index directory (a claim file created, replaced or removed, a cursor
//     file replaced, an entry written) ends, still under the lock, by setting
//     the modification time of each directory it changed back to its mark,
//     the time .state records: 2001-09-09 01:46:40 UTC (10^9 seconds since
//     1970) and a random fraction of a second, chosen at each rebuild and
//     read back as the filesystem keeps it. Any other change to a directory
//     (a file created, renamed or removed in it) sets its modification time
//     to the current time, which is never that far in the past. So a
//     directory that carries its mark has not changed since, however coarse
//     the filesystem's timestamps and however soon after the change: nothing
//     here compares two times that two changes within one clock tick could
//     share. Every reservation of host-local's creates a claim file, which
//     erases the mark (its rewrite of last_reserved_ip.<N> in place, which
//     changes no directory, is not needed for that).
//   - A write marks a directory again only if both directories carried their
//     marks when it took the lock, so that one write of this package's after
//     another program's does not hide it.
//   - The index is believed if .state names this boot
//     (/proc/sys/kernel/random/boot_id) and the network directory (device and
//     inode), and both directories carry their marks: two fstat(2) calls,
//     made by every call that uses the index, and under the lock by every
//     write. A Store reads .state again when the marks it last read do not
//     match, as after another Store's rebuild.
//   - Otherwise, the first call that needs the index (Open, if no other
//     process holds the lock; Owned; CreateExclusive) rebuilds it under the
//     lock, and logs why (Options.Logger): it reads every claim file and
//     every entry, rewrites the entries that differ, removes those of
//     containers that hold nothing and the temporary files left in either
//     directory, writes a new .state and marks both directories.
//
// After a host-local reservation or release, then, the next Owned or
// CreateExclusive costs one rebuild, about what every host-local call costs
// (see Cost), and the ones after it cost what they cost before.
//
// A .state or an entry that is not a symbolic link, or whose target does not
// parse, is corrupt: a Store logs a warning naming the file and the problem
// and rebuilds the index, losing nothing, since the claim files are the truth.
// An entry or .state removed, replaced or added by another program erases the
// index directory's mark, and a missing index directory or .state is rebuilt.
// What the marks cannot catch is a program that edits the index and then sets
// the directory's time back to its mark, or that changes the network
// directory without the lock while a Store writes (whose mark then hides the
// change): the index directory is this package's, and the network directory's
// writers take the lock, as host-local does. If the directories' times cannot
// be set (a filesystem that will not, or a directory this process does not
// own), a Store logs it once, and every call that needs the index rebuilds it.
//
// Stores on one directory, in one process or several, agree at every moment:
// they share the claim files, the index, its marks and the lock. Every Store
// of one network directory must use the same index directory; two that do not
// keep two indexes that erase each other's marks, so that each rebuilds at
// every call.
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
// it. Get, and Owned while the index is believed, do not take the lock: this
// package names a claim file only once it is complete (see Writes), so a reader
// sees a whole file or none. A read that finds a file in the middle of a write
// (an empty file that host-local has created but not yet written, or a new
// claim still linked to its temporary name) reads it again under the lock;
// Owned also asks again under the lock when an entry lists an address that is
// not the container's (a write may be in the middle of adding it). List reads
// the whole directory under the lock, so that what it returns is the
// directory at one moment: without it, a claim file removed and another
// created while it reads could both be listed, and an allocator that confirms
// a pool exhausted with List would count an address twice. The cursor file is
// rewritten in place, by host-local and by this package, so Cursor reads it
// under the lock, as host-local does. Locks are per host: the directory must
// not be shared over a network filesystem.
//
// # Writes
//
// Create, CreateAndSetCursor and CreateExclusive write a claim file as one new inode with one
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
// both. Every write also updates the owner index and the directories' marks,
// in the order given under The owner index.
//
// # Crash safety
//
// No claim file is ever empty or partial, even if the process dies at any
// instant: a claim file gets its name only once it is complete, and Update
// renames a complete file over the claim. An unnamed file of a process that
// dies is freed by the kernel; a temporary file left by a crash is never read
// as a claim, and the rebuild of the owner index that the crash makes due (at
// the next Open, if the lock is free, or the next Owned or CreateExclusive)
// removes it. Nor does this package ever leave a cursor
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
// The owner index is right after a crash at any instant. A process that dies
// in the middle of a write leaves the directories it changed without their
// marks, so the next Store rebuilds the index from the claim files; and the
// order of the writes (the entry before the claim file, the claim file gone
// before the entry) keeps every entry a superset of its container's claims at
// every instant besides, for a reader that comes in the middle. Nothing of the
// index is fsynced, with Sync or without: what must survive a power loss is
// the claims, which Sync fsyncs before a write returns, and the index is not
// believed across a reboot (.state names the boot it was built in), so the
// first call after a power loss rebuilds it from the claim files that
// survived, whatever order the filesystem kept the writes in. Where the boot
// ID cannot be read (no /proc), it is taken as the same across reboots, and
// the index may then miss claims written just before a power loss.
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
// Get, Cursor and SetCursor touch only the files they name. Create, Update
// and Delete touch the files they name, their containers' index entries and
// the directories' marks: none of it grows with the number of claims. Without
// Sync, a Create of a new container's claim makes 16 system calls (flock
// twice; fstat of both directories; the lstat that finds the address free;
// readlink and symlink of the entry; for the claim file open, write,
// utimensat, linkat, fstat, the FS_IOC_GETVERSION ioctl and close; utimensat
// of both directories; 11 of them without the index) and creates two inodes
// (the claim file, the entry), one in each directory; CreateAndSetCursor adds
// the cursor's fstat and pwrite, and CreateExclusive as many (its readlink of
// the entry serves both the check and the update). A Delete of a container's
// last claim makes 14 and frees both inodes. On ext4 without a journal the
// new inodes are most of the cost: the inode allocator skips, one by one, the
// inodes freed in the last minutes.
//
// Owned, while the index is believed, makes two fstat calls, one readlink of
// the container's entry, and reads the claim file of each address the entry
// lists: for a new container, as in the common CNI ADD, three system calls
// and no claim file; CreateExclusive reads the same under the lock. Neither
// grows with the claims of other containers: benchmarks/README.md has the
// figures from 1,000 to 60,000 claim files. A query by UID or name reads
// nothing.
//
// A stale index costs one rebuild, paid by the first call that needs the
// index: it reads every claim file (open, fstat, read, close) and every entry
// (readlink), and writes only the entries that differ, about what host-local
// pays on every call to walk the directory. The first Open of a directory
// without an index (written by host-local, or by an older version of this
// package) also writes one entry per container: 60,000 symbolic links for
// 60,000 claims of as many containers, once. The index takes one inode per
// container with claims.
//
// List reads the directory and every file of the pool under the lock, so
// writers, this package's and host-local's, wait while it reads: it is the
// load path, a few milliseconds per thousand claims.
package filestore
