//! The filesystem a FUSE mount serves, apart from the protocol: open
//! handles, the choice between kernel passthrough and the page cache,
//! negative entries and their lifetime, the room promised for attributes
//! that grow, directory listings at stable offsets, and the errno of every
//! failure. `fuse.rs` only moves requests and replies between `fuser` and
//! [`Fs`]; everything here is unit-tested without `/dev/fuse`
//! (`fs_tests.rs`).
//!
//! Speed comes from the kernel: long entry/attribute TTLs, `FOPEN_KEEP_CACHE`
//! (so repeat reads never reach us), several worker threads, and — for
//! files served unchanged — kernel passthrough (`FUSE_PASSTHROUGH`, Linux ≥
//! 6.9), which makes their reads native. Binaries must stay mmap-able for
//! `dlopen`, so nothing uses direct I/O.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use fuser::{Errno, FileAttr, FileType, INodeNo, OpenAccMode, OpenFlags};

use kpackfs_core::namespace::Namespace;
use kpackfs_core::source::{FsStats, Time};
use kpackfs_core::view::{Attr, DirEntry, NodeType, OpenFile, XATTR_PREFIX, XATTR_STATS};

use crate::errno::errno;
use crate::watch::Watcher;

/// Lifetime of the kernel's negative entries. Short: a synthesized archive
/// can appear when its binary changes, with no source event for its own
/// name.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(5);

/// Bytes promised beyond the counters' size at a size probe: they grow
/// between the probe and the fetch that follows it, which must not then
/// fail with ERANGE (a value may be shorter than its probed size).
pub const STATS_SLACK: u32 = 256;

/// Block size reported in attributes (the kernel's read size hint).
const BLKSIZE: u32 = 128 * 1024;

fn systime(t: Time) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())
    }
}

fn file_type(k: NodeType) -> FileType {
    match k {
        NodeType::Dir => FileType::Directory,
        NodeType::File => FileType::RegularFile,
        NodeType::Symlink => FileType::Symlink,
    }
}

/// The kernel's attributes of a view node.
fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: systime(a.atime),
        mtime: systime(a.mtime),
        ctime: systime(a.ctime),
        crtime: systime(a.ctime),
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink.min(u32::MAX as u64) as u32,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// The attributes of a negative entry (node 0).
fn negative_attr() -> FileAttr {
    let t = systime(Time::default());
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// Attributes and how long the kernel may keep them (for an entry: the
/// name too). Node 0 is a negative entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub attr: FileAttr,
    pub ttl: Duration,
}

/// An opened file: its handle and, for kernel passthrough, the backing id
/// to answer with.
pub struct Opened<B> {
    pub fh: u64,
    pub backing: Option<Arc<B>>,
}

/// An attribute value or list: its size (the caller asked with size 0) or
/// its bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// Registers a file with the kernel for passthrough (`fuser`'s
/// `ReplyOpen::open_backing`; a fake in tests).
pub trait BackingOpener<B> {
    fn open_backing(&self, file: &File) -> std::io::Result<B>;
}

/// Takes `readdir` entries until the reply is full (`add` returns true).
pub trait DirReplier {
    fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool;
}

/// Takes `readdirplus` entries until the reply is full (`add` returns true).
pub trait DirPlusReplier {
    fn add(&mut self, name: &OsStr, offset: u64, entry: &Entry) -> bool;
}

/// An open regular file.
struct Handle<B> {
    file: OpenFile,
    /// Keeps the kernel's passthrough backing alive until release.
    backing: Option<Arc<B>>,
}

/// How each inode's open handles are served (see [`Fs::io_mode`]).
struct IoModes<B> {
    backing: HashMap<u64, Weak<B>>,
    cached: HashMap<u64, usize>,
}

/// A directory snapshot taken at opendir, so offsets stay valid.
struct DirHandle {
    entries: Vec<DirEntry>,
}

/// The filesystem of one mount; `B` is the kernel's passthrough backing id
/// (`fuser::BackingId`).
pub struct Fs<B> {
    views: Arc<Namespace>,
    ttl: Duration,
    want_passthrough: bool,
    passthrough: AtomicBool,
    next_fh: AtomicU64,
    /// Open handles, shared out of the map so no shard lock is held across
    /// a read (which may wait on the disk or a decode) or a readdirplus
    /// (which may plan binaries): opens and releases never queue behind I/O.
    files: DashMap<u64, Arc<Handle<B>>>,
    dirs: DashMap<u64, Arc<DirHandle>>,
    /// Per inode: its backing id while passthrough handles are open, and
    /// the number of open handles served through the page cache. The kernel
    /// refuses to mix the two modes on one inode (a file may become
    /// passthrough-able mid-life, when its local copy is ready), so the
    /// choice is made under this lock. (The kernel also rejects a second,
    /// different backing id for an inode.)
    modes: Mutex<IoModes<B>>,
    watcher: Option<Arc<Watcher>>,
}

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl<B> Fs<B> {
    /// `passthrough`: use kernel passthrough where the kernel offers it
    /// (see [`Fs::set_passthrough`]).
    pub fn new(views: Arc<Namespace>, ttl: Duration, passthrough: bool, watcher: Option<Arc<Watcher>>) -> Fs<B> {
        Fs {
            views,
            ttl,
            want_passthrough: passthrough,
            passthrough: AtomicBool::new(false),
            next_fh: AtomicU64::new(1),
            files: DashMap::new(),
            dirs: DashMap::new(),
            modes: Mutex::new(IoModes { backing: HashMap::new(), cached: HashMap::new() }),
            watcher,
        }
    }

    /// Whether to ask the kernel for passthrough at init.
    pub fn wants_passthrough(&self) -> bool {
        self.want_passthrough
    }

    /// Whether the kernel agreed to passthrough (at init).
    pub fn set_passthrough(&self, negotiated: bool) {
        self.passthrough.store(negotiated, Ordering::Relaxed);
    }

    /// The counters, for the log at unmount.
    pub fn stats(&self) -> String {
        self.views.stats().to_string()
    }

    /// Source directories the kernel knows about are watched for changes.
    fn watch(&self, ino: u64) {
        if let (Some(w), Ok(p)) = (&self.watcher, self.views.path_of(ino)) {
            w.watch_dir(&p);
        }
    }

    fn fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// The open handle `fh`, cloned out of the map (no lock held).
    fn handle(&self, fh: u64) -> Option<Arc<Handle<B>>> {
        self.files.get(&fh).map(|h| h.clone())
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Entry, Errno> {
        match self.views.lookup(parent, name) {
            Ok(a) => {
                if a.kind == NodeType::Dir {
                    self.watch(a.ino);
                }
                Ok(Entry { attr: fuse_attr(&a), ttl: self.ttl })
            }
            // A negative entry (node 0) lets the kernel answer repeated
            // probes of missing names itself — the loader probes several
            // archive names per wrapper.
            Err(e) if errno(&e) == Errno::ENOENT => Ok(Entry { attr: negative_attr(), ttl: self.ttl.min(NEGATIVE_TTL) }),
            Err(e) => Err(errno(&e)),
        }
    }

    /// The kernel dropped `nlookup` references to `ino`: the view's table
    /// follows what the kernel holds, so memory stays bounded by the live
    /// set over weeks of changing sources.
    pub fn forget(&self, ino: u64, nlookup: u64) {
        self.views.forget(ino, nlookup);
    }

    /// fstat() of an open file (`fh`) answers for the version that was
    /// opened.
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> Result<Entry, Errno> {
        if let Some(h) = fh.and_then(|fh| self.handle(fh)) {
            return Ok(Entry { attr: fuse_attr(h.file.attr()), ttl: self.ttl });
        }
        let a = self.views.getattr(ino).map_err(|e| errno(&e))?;
        Ok(Entry { attr: fuse_attr(&a), ttl: self.ttl })
    }

    pub fn readlink(&self, ino: u64) -> Result<OsString, Errno> {
        self.views.readlink(ino).map_err(|e| errno(&e))
    }

    /// Opens `ino` read-only (anything else: EROFS), served through kernel
    /// passthrough where possible (`opener` registers the file).
    pub fn open(&self, ino: u64, flags: OpenFlags, opener: &impl BackingOpener<B>) -> Result<Opened<B>, Errno> {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return Err(Errno::EROFS);
        }
        let file = self.views.open(ino).map_err(|e| errno(&e))?;
        let fh = self.fh();
        let backing = self.io_mode(opener, ino, &file);
        // Recorded before the reply: once the kernel has the handle, its
        // RELEASE may reach another worker at once.
        self.files.insert(fh, Arc::new(Handle { file, backing: backing.clone() }));
        Ok(Opened { fh, backing })
    }

    /// Chooses how an open is served: `Some(backing)` for kernel
    /// passthrough (reusing a live backing id of the inode), `None` for the
    /// page cache, which is then counted until release.
    fn io_mode(&self, opener: &impl BackingOpener<B>, ino: u64, file: &OpenFile) -> Option<Arc<B>> {
        let mut m = self.modes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = m.backing.get(&ino).and_then(Weak::upgrade) {
            return Some(id);
        }
        let cached = m.cached.get(&ino).copied().unwrap_or(0);
        if self.passthrough.load(Ordering::Relaxed) && cached == 0 {
            if let Some(f) = file.passthrough_file() {
                match opener.open_backing(f) {
                    Ok(id) => {
                        let id = Arc::new(id);
                        m.backing.insert(ino, Arc::downgrade(&id));
                        return Some(id);
                    }
                    // Refused for the whole mount (no privilege, no kernel
                    // support): stop trying.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOTTY | libc::ENOSYS | libc::EOPNOTSUPP)) => {
                        log::info!("kernel passthrough unavailable ({e}); serving every file through the daemon");
                        self.passthrough.store(false, Ordering::Relaxed);
                    }
                    // Refused for this file (a stacked backing filesystem,
                    // out of descriptors): serve it through the page cache.
                    Err(e) => log::debug!("no kernel passthrough for inode {ino}: {e}"),
                }
            }
        }
        *m.cached.entry(ino).or_insert(0) += 1;
        None
    }

    /// Reads up to `size` bytes at `offset` of handle `fh` and hands them
    /// (or the errno) to `reply`, from a per-thread buffer.
    pub fn read<R>(&self, fh: u64, offset: u64, size: u32, reply: impl FnOnce(Result<&[u8], Errno>) -> R) -> R {
        let Some(h) = self.handle(fh) else { return reply(Err(Errno::EBADF)) };
        READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            buf.resize(size as usize, 0);
            match h.file.read_at(offset, &mut buf) {
                Ok(n) => reply(Ok(&buf[..n])),
                Err(e) => {
                    if e.already_reported() {
                        log::debug!("read failed: {e}");
                    } else {
                        log::warn!("read failed: {e}");
                    }
                    reply(Err(errno(&e)))
                }
            }
        })
    }

    pub fn release(&self, ino: u64, fh: u64) {
        if let Some((_, h)) = self.files.remove(&fh) {
            let mut m = self.modes.lock().unwrap_or_else(|p| p.into_inner());
            if h.backing.is_none() {
                if let Some(n) = m.cached.get_mut(&ino) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        m.cached.remove(&ino);
                    }
                }
            }
            // Dropping the handle (under the lock) may close the backing id.
            drop(h);
            m.backing.retain(|_, w| w.strong_count() > 0);
        }
    }

    /// Takes the listing of `ino` for a new directory handle.
    pub fn opendir(&self, ino: u64) -> Result<u64, Errno> {
        let entries = self.views.readdir(ino).map_err(|e| errno(&e))?;
        self.watch(ino);
        let fh = self.fh();
        self.dirs.insert(fh, Arc::new(DirHandle { entries }));
        Ok(fh)
    }

    fn dir(&self, fh: u64) -> Result<Arc<DirHandle>, Errno> {
        self.dirs.get(&fh).map(|d| d.clone()).ok_or(Errno::EBADF)
    }

    /// Entries of handle `fh` from `offset` on. Offsets: 1 = ".",
    /// 2 = "..", 2+i+1 = entry i.
    pub fn readdir(&self, ino: u64, fh: u64, offset: u64, reply: &mut impl DirReplier) -> Result<(), Errno> {
        let d = self.dir(fh)?;
        let parent_ino = self.views.parent_attr(ino).map(|a| a.ino).unwrap_or(ino);
        let dots = [(ino, FileType::Directory, OsStr::new(".")), (parent_ino, FileType::Directory, OsStr::new(".."))];
        let all = dots.into_iter().chain(d.entries.iter().map(|e| (e.ino, file_type(e.kind), e.name.as_os_str())));
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(ino, (i + 1) as u64, kind, name) {
                break;
            }
        }
        Ok(())
    }

    /// As [`Fs::readdir`], with each entry's attributes (a lookup each:
    /// the kernel then holds a reference to every entry sent).
    pub fn readdirplus(&self, ino: u64, fh: u64, offset: u64, reply: &mut impl DirPlusReplier) -> Result<(), Errno> {
        let d = self.dir(fh)?;
        let self_attr = self.views.getattr(ino).map_err(|e| errno(&e))?;
        let parent_attr = self.views.parent_attr(ino).unwrap_or_else(|_| self_attr.clone());
        let total = d.entries.len() + 2;
        for i in (offset as usize)..total {
            let (name, attr) = match i {
                0 => (OsStr::new("."), self_attr.clone()),
                1 => (OsStr::new(".."), parent_attr.clone()),
                n => {
                    let e = &d.entries[n - 2];
                    match self.views.lookup(ino, &e.name) {
                        Ok(a) => (e.name.as_os_str(), a),
                        // Vanished since opendir: skip it.
                        Err(_) => continue,
                    }
                }
            };
            if reply.add(name, (i + 1) as u64, &Entry { attr: fuse_attr(&attr), ttl: self.ttl }) {
                // Not sent (the buffer is full): the kernel holds no
                // reference for it, so neither may the table.
                if i >= 2 {
                    self.views.forget(attr.ino, 1);
                }
                break;
            }
        }
        Ok(())
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.remove(&fh);
    }

    pub fn statfs(&self) -> Result<FsStats, Errno> {
        self.views.statfs().map_err(|e| errno(&e))
    }

    /// Read-only: write access is EROFS; otherwise the node must exist
    /// (permissions are the kernel's, `default_permissions`).
    pub fn access(&self, ino: u64, write: bool) -> Result<(), Errno> {
        if write {
            return Err(Errno::EROFS);
        }
        self.views.getattr(ino).map(|_| ()).map_err(|e| errno(&e))
    }

    /// Attribute `name` of `ino`: its size when `size` is 0, else its value
    /// if it fits in `size` bytes (ERANGE otherwise).
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrReply, Errno> {
        // Names outside our namespace (security.selinux, system.posix_acl_*,
        // probed by `ls -l` for every entry) never cost a lookup of the value.
        let Some(name) = name.to_str().filter(|n| n.starts_with(XATTR_PREFIX)) else {
            self.views.getattr(ino).map_err(|e| errno(&e))?;
            return Err(Errno::NO_XATTR);
        };
        let v = self.views.xattr(ino, name).map_err(|e| errno(&e))?.ok_or(Errno::NO_XATTR)?;
        let slack = if name == XATTR_STATS { STATS_SLACK } else { 0 };
        fit(v, size, slack)
    }

    /// The names of `ino`'s attributes, each NUL-terminated (sized as
    /// [`Fs::getxattr`] values are).
    pub fn listxattr(&self, ino: u64, size: u32) -> Result<XattrReply, Errno> {
        let names = self.views.xattr_names(ino).map_err(|e| errno(&e))?;
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n.as_bytes());
            list.push(0);
        }
        fit(list, size, 0)
    }
}

/// The xattr protocol's answer for `v` to a caller with `size` bytes of
/// room (0: a size probe, promised `slack` more).
fn fit(v: Vec<u8>, size: u32, slack: u32) -> Result<XattrReply, Errno> {
    if size == 0 {
        Ok(XattrReply::Size((v.len() as u32).saturating_add(slack)))
    } else if v.len() > size as usize {
        Err(Errno::ERANGE)
    } else {
        Ok(XattrReply::Data(v))
    }
}
