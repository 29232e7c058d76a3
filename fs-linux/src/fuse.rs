//! The FUSE protocol: each `fuser` request forwarded to [`Fs`] and its
//! answer (or errno) put into the reply; the kernel capabilities asked for
//! at init. No policy lives here (see `fs.rs`), no format logic anywhere in
//! this crate.

use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::fs::{BackingOpener, DirPlusReplier, DirReplier, Entry, Fs, Opened, XattrReply};

/// The mount's filesystem as `fuser` drives it.
pub struct KpackFs {
    fs: Fs<BackingId>,
}

impl KpackFs {
    pub fn new(fs: Fs<BackingId>) -> KpackFs {
        KpackFs { fs }
    }
}

impl BackingOpener<BackingId> for ReplyOpen {
    fn open_backing(&self, file: &File) -> std::io::Result<BackingId> {
        ReplyOpen::open_backing(self, file)
    }
}

impl DirReplier for ReplyDirectory {
    fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool {
        ReplyDirectory::add(self, INodeNo(ino), offset, kind, name)
    }
}

impl DirPlusReplier for ReplyDirectoryPlus {
    fn add(&mut self, name: &OsStr, offset: u64, e: &Entry) -> bool {
        ReplyDirectoryPlus::add(self, e.attr.ino, offset, name, &e.ttl, &e.attr, Generation(0))
    }
}

fn xattr_reply(r: Result<XattrReply, Errno>, reply: ReplyXattr) {
    match r {
        Ok(XattrReply::Size(n)) => reply.size(n),
        Ok(XattrReply::Data(v)) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

/// The kernel's readahead window for files of the mount (see `init`;
/// set through the bdi knob by `mount::set_readahead`).
pub(crate) const READAHEAD: u32 = 512 << 10;

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
        // Readahead windows of 512 KiB. Measured on cold sequential reads
        // of librocsparse's archive and transformed library (read_ahead_kb
        // toggled live, 6 shuffled rounds): 512 KiB was best for both, 1 MiB
        // (what kpackfs used) and 128 KiB (the kernel's FUSE default) both
        // 0.80-0.95x of it. A window is one request the reader waits on
        // whole; smaller ones mean more requests, each a cross-CPU wake-up.
        // Requests still carry up to 1 MiB where the reader asks for it
        // (O_DIRECT, large reads): that is max_pages, not readahead. The
        // kernel offers 128 KiB here and takes no more from the reply;
        // mount::set_readahead raises it afterwards.
        let _ = cfg.set_max_readahead(READAHEAD).or_else(|max| cfg.set_max_readahead(max));
        if self.fs.wants_passthrough() {
            let ok = cfg.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && cfg.set_max_stack_depth(1).is_ok();
            self.fs.set_passthrough(ok);
            log::info!("kernel passthrough {}", if ok { "negotiated" } else { "not supported by this kernel" });
        }
        Ok(())
    }

    fn destroy(&mut self) {
        log::info!("unmounted; counters:\n{}", self.fs.stats());
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name) {
            Ok(e) => reply.entry_with_ttls(&e.ttl, &e.ttl, &e.attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// (`batch_forget`'s default calls this for each node.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0, fh.map(|f| f.0)) {
            Ok(e) => reply.attr(&e.ttl, &e.attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(t.as_encoded_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.open(ino.0, flags, &reply) {
            // The kernel accepts only passthrough-compatible open flags
            // here (no KEEP_CACHE: it caches nothing itself).
            Ok(Opened { fh, backing: Some(id) }) => reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id),
            // Cached pages stay valid: a changed source file gets a new inode.
            Ok(Opened { fh, backing: None }) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        self.fs.read(fh.0, offset, size, |r| match r {
            Ok(data) => reply.data(data),
            Err(e) => reply.error(e),
        })
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.fs.release(ino.0, fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(ino.0) {
            // The kernel may cache the listing for this open, but not keep
            // it across opens (no KEEP_CACHE): a readdir in flight while a
            // source change is invalidated can put the old entries back
            // into the kernel's cache after the invalidation, and they would
            // stay until the next change. Each opendir asks again; the
            // daemon answers from its own listing, which the change did drop.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.fs.readdir(ino.0, fh.0, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        match self.fs.readdirplus(ino.0, fh.0, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
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
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.fs.access(ino.0, mask.contains(AccessFlags::W_OK)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.getxattr(ino.0, name, size), reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.listxattr(ino.0, size), reply)
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
