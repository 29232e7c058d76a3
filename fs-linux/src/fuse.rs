//! The FUSE adapter: translates `fuser` requests into [`View`] calls and
//! view errors into errno. No format logic lives here.
//!
//! Speed comes from the kernel: long entry/attribute TTLs, `FOPEN_KEEP_CACHE`
//! (so repeat reads never reach us), several worker threads, and — for
//! files served unchanged — kernel passthrough (`FUSE_PASSTHROUGH`, Linux ≥
//! 6.9), which makes their reads native. Binaries must stay mmap-able for
//! `dlopen`, so nothing uses direct I/O.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use kpackfs_core::source::Time;
use kpackfs_core::view::{self, Attr, DirEntry, NodeType, OpenFile};
use kpackfs_core::views::Views;

use crate::errno::errno;

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
        blksize: 128 * 1024,
        flags: 0,
    }
}

/// Lifetime of the kernel's negative entries.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

fn negative_attr() -> Attr {
    Attr {
        ino: 0,
        kind: NodeType::File,
        origin: view::Origin::Passthrough,
        size: 0,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        atime: Time::default(),
        mtime: Time::default(),
        ctime: Time::default(),
    }
}

/// An open regular file.
struct Handle {
    file: OpenFile,
    /// Keeps the kernel's passthrough backing alive until release.
    backing: Option<Arc<BackingId>>,
}

/// How each inode's open handles are served (see `KpackFs::backing`).
#[derive(Default)]
struct IoModes {
    backing: HashMap<u64, Weak<BackingId>>,
    cached: HashMap<u64, usize>,
}

/// A directory snapshot taken at opendir, so offsets stay valid.
struct DirHandle {
    entries: Vec<DirEntry>,
}

pub struct KpackFs {
    view: Arc<Views>,
    ttl: Duration,
    want_passthrough: bool,
    passthrough: AtomicBool,
    next_fh: AtomicU64,
    /// Open handles, shared out of the map so no shard lock is held across
    /// a read (which may wait on the disk or a decode) or a readdirplus
    /// (which may plan binaries): opens and releases never queue behind I/O.
    files: DashMap<u64, Arc<Handle>>,
    dirs: DashMap<u64, Arc<DirHandle>>,
    /// Per inode: its backing id while passthrough handles are open, and
    /// the number of open handles served through the page cache. The kernel
    /// refuses to mix the two modes on one inode (a file may become
    /// passthrough-able mid-life, when its local copy is ready), so the
    /// choice is made under this lock. (The kernel also rejects a second,
    /// different backing id for an inode.)
    backing: Mutex<IoModes>,
    watcher: Option<Arc<crate::watch::Watcher>>,
}

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl KpackFs {
    pub fn new(view: Arc<Views>, ttl: Duration, passthrough: bool, watcher: Option<Arc<crate::watch::Watcher>>) -> KpackFs {
        KpackFs {
            view,
            ttl,
            want_passthrough: passthrough,
            passthrough: AtomicBool::new(false),
            next_fh: AtomicU64::new(1),
            files: DashMap::new(),
            dirs: DashMap::new(),
            backing: Mutex::new(IoModes::default()),
            watcher,
        }
    }

    /// Source directories the kernel knows about are watched for changes.
    fn watch(&self, ino: u64) {
        if let (Some(w), Ok(p)) = (&self.watcher, self.view.path_of(ino)) {
            w.watch_dir(&p);
        }
    }

    /// The open handle `fh`, cloned out of the map (no lock held).
    fn handle(&self, fh: FileHandle) -> Option<Arc<Handle>> {
        self.files.get(&fh.0).map(|h| h.clone())
    }

    fn fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Chooses how an open is served: `Some(backing)` for kernel
    /// passthrough (reusing a live backing id of the inode), `None` for the
    /// page cache, which is then counted until release.
    fn io_mode(&self, reply: &ReplyOpen, ino: u64, file: &OpenFile) -> Option<Arc<BackingId>> {
        let mut m = self.backing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = m.backing.get(&ino).and_then(Weak::upgrade) {
            return Some(id);
        }
        let cached = m.cached.get(&ino).copied().unwrap_or(0);
        if self.passthrough.load(Ordering::Relaxed) && cached == 0 {
            if let Some(f) = file.passthrough_file() {
                match reply.open_backing(f) {
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
}

impl Filesystem for KpackFs {
    fn init(&mut self, _req: &Request, cfg: &mut KernelConfig) -> std::io::Result<()> {
        for flag in [
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
        ] {
            if cfg.add_capabilities(flag).is_err() {
                log::debug!("kernel lacks {flag:?}");
            }
        }
        let _ = cfg.set_max_readahead(1 << 20).or_else(|max| cfg.set_max_readahead(max));
        if self.want_passthrough {
            let ok = cfg.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && cfg.set_max_stack_depth(1).is_ok();
            self.passthrough.store(ok, Ordering::Relaxed);
            log::info!("kernel passthrough {}", if ok { "negotiated" } else { "not supported by this kernel" });
        }
        Ok(())
    }

    fn destroy(&mut self) {
        log::info!("unmounted; counters:\n{}", self.view.stats());
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.view.lookup(parent.0, name) {
            Ok(a) => {
                if a.kind == NodeType::Dir {
                    self.watch(a.ino);
                }
                reply.entry_with_ttls(&self.ttl, &self.ttl, &fuse_attr(&a), Generation(0))
            }
            // A negative entry (node 0) lets the kernel answer repeated
            // probes of missing names itself — the loader probes several
            // archive names per wrapper. Short-lived: a synthesized archive
            // can appear when its binary changes, with no source event for
            // its own name.
            Err(e) if crate::errno::raw(&e) == libc::ENOENT => {
                let ttl = self.ttl.min(NEGATIVE_TTL);
                reply.entry_with_ttls(&ttl, &ttl, &fuse_attr(&negative_attr()), Generation(0))
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The kernel dropped its references to an inode: the view's table
    /// follows what the kernel holds, so memory stays bounded by the live
    /// set over weeks of changing sources. (`batch_forget`'s default calls
    /// this for each node.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // fstat() of an open file answers for the version that was opened.
        if let Some(h) = fh.and_then(|fh| self.handle(fh)) {
            return reply.attr(&self.ttl, &fuse_attr(h.file.attr()));
        }
        match self.view.getattr(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &fuse_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.view.readlink(ino.0) {
            Ok(t) => reply.data(t.as_encoded_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let file = match self.view.open(ino.0) {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        let fh = self.fh();
        match self.io_mode(&reply, ino.0, &file) {
            Some(id) => {
                // Recorded before the reply: once the kernel has the handle,
                // its RELEASE may reach another worker at once.
                self.files.insert(fh, Arc::new(Handle { file, backing: Some(id.clone()) }));
                // The kernel accepts only passthrough-compatible open flags
                // here (no KEEP_CACHE: it caches nothing itself).
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id);
            }
            None => {
                self.files.insert(fh, Arc::new(Handle { file, backing: None }));
                // Cached pages stay valid: a changed source file gets a new inode.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
            }
        }
    }

    fn read(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        let Some(h) = self.handle(fh) else { return reply.error(Errno::EBADF) };
        READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            buf.resize(size as usize, 0);
            match h.file.read_at(offset, &mut buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => {
                    if e.already_reported() {
                        log::debug!("read failed: {e}");
                    } else {
                        log::warn!("read failed: {e}");
                    }
                    reply.error(errno(&e))
                }
            }
        });
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        if let Some((_, h)) = self.files.remove(&fh.0) {
            let mut m = self.backing.lock().unwrap_or_else(|p| p.into_inner());
            if h.backing.is_none() {
                if let Some(n) = m.cached.get_mut(&ino.0) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        m.cached.remove(&ino.0);
                    }
                }
            }
            // Dropping the handle (under the lock) may close the backing id.
            drop(h);
            m.backing.retain(|_, w| w.strong_count() > 0);
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.view.readdir(ino.0) {
            Ok(entries) => {
                self.watch(ino.0);
                let fh = self.fh();
                self.dirs.insert(fh, Arc::new(DirHandle { entries }));
                // The kernel may cache the listing for this open, but not
                // keep it across opens (no KEEP_CACHE): a readdir in flight
                // while a source change is invalidated can put the old
                // entries back into the kernel's cache after the
                // invalidation, and they would stay until the next change.
                // Each opendir asks again; the daemon answers from its own
                // listing, which the change did drop.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(d) = self.dirs.get(&fh.0).map(|d| d.clone()) else { return reply.error(Errno::EBADF) };
        // Offsets: 1 = ".", 2 = "..", 2+i+1 = entries[i].
        let parent_ino = self.view.parent_attr(ino.0).map(|a| a.ino).unwrap_or(ino.0);
        let dots = [(ino.0, FileType::Directory, OsStr::new(".")), (parent_ino, FileType::Directory, OsStr::new(".."))];
        let all = dots.iter().map(|(i, k, n)| (*i, *k, *n)).chain(d.entries.iter().map(|e| (e.ino, file_type(e.kind), e.name.as_os_str())));
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Some(d) = self.dirs.get(&fh.0).map(|d| d.clone()) else { return reply.error(Errno::EBADF) };
        let self_attr = match self.view.getattr(ino.0) {
            Ok(a) => a,
            Err(e) => return reply.error(errno(&e)),
        };
        let parent_attr = self.view.parent_attr(ino.0).unwrap_or_else(|_| self_attr.clone());
        let mut i = offset as usize;
        let total = d.entries.len() + 2;
        while i < total {
            let (name, attr) = match i {
                0 => (OsStr::new("."), self_attr.clone()),
                1 => (OsStr::new(".."), parent_attr.clone()),
                n => {
                    let e = &d.entries[n - 2];
                    match self.view.lookup(ino.0, &e.name) {
                        Ok(a) => (e.name.as_os_str(), a),
                        // Vanished since opendir: skip it.
                        Err(_) => {
                            i += 1;
                            continue;
                        }
                    }
                }
            };
            if reply.add(INodeNo(attr.ino), (i + 1) as u64, name, &self.ttl, &fuse_attr(&attr), Generation(0)) {
                // Not sent (the buffer is full): the kernel holds no
                // reference for it, so neither may the table.
                if i >= 2 {
                    self.view.forget(attr.ino, 1);
                }
                break;
            }
            i += 1;
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.view.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                0,
                0,
                s.files,
                0,
                s.block_size.min(u32::MAX as u64) as u32,
                s.name_max.min(u32::MAX as u64) as u32,
                s.block_size.min(u32::MAX as u64) as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        match self.view.getattr(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Names outside our namespace (security.selinux, system.posix_acl_*,
        // probed by `ls -l` for every entry) never cost a lookup of the value.
        let Some(name) = name.to_str().filter(|n| n.starts_with("user.kpackfs.")) else {
            return match self.view.getattr(ino.0) {
                Ok(_) => reply.error(Errno::NO_XATTR),
                Err(e) => reply.error(errno(&e)),
            };
        };
        match self.view.xattr(ino.0, name) {
            Err(e) => reply.error(errno(&e)),
            Ok(None) => reply.error(Errno::NO_XATTR),
            // The counters grow between a size probe and the fetch that
            // follows it: promise some room, so the fetch never fails
            // with ERANGE (a value may be shorter than its probed size).
            Ok(Some(v)) if size == 0 => reply.size(v.len() as u32 + if name == "user.kpackfs.stats" { 256 } else { 0 }),
            Ok(Some(v)) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(Some(v)) => reply.data(&v),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let names = match self.view.xattr_names(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n.as_bytes());
            list.push(0);
        }
        if size == 0 {
            reply.size(list.len() as u32)
        } else if list.len() > size as usize {
            reply.error(Errno::ERANGE)
        } else {
            reply.data(&list)
        }
    }

    // Read-only: every mutating operation answers EROFS.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _t: &Path, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn rename(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _np: INodeNo, _nn: &OsStr, _f: RenameFlags, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _f: i32, reply: ReplyCreate) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, _v: &[u8], _f: i32, _p: u32, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(&self, _req: &Request, _i: INodeNo, _fh: FileHandle, _o: u64, _l: u64, _m: i32, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _off_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _off_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }
}
