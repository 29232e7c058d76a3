//! plainfs: the benchmark baseline for kpackfs — the simplest correct
//! read-only passthrough of a directory over FUSE with fuser 0.18 defaults:
//! lookup/getattr/readdir/open/read (pread)/readlink/release, TTL 1 s, no
//! FOPEN_KEEP_CACHE (each open drops the kernel's cached pages of the file),
//! no kernel passthrough, default readahead, 4 worker threads (one cloned
//! /dev/fuse fd each, as kpackfs).
//!
//! Usage: plainfs SOURCE MOUNTPOINT [--threads N] [--no-clone-fd]
//! Runs in the foreground; ends when the mountpoint is unmounted (`umount`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenAccMode, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Inodes {
    by_path: HashMap<PathBuf, u64>,
    paths: Vec<PathBuf>, // index = ino - 1; paths relative to the source ("" = root)
}

struct PlainFs {
    root: PathBuf,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    next_fh: AtomicU64,
}

fn systime(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs())
    }
}

fn kind_of(md: &Metadata) -> FileType {
    FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile)
}

fn attr(ino: u64, md: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: systime(md.atime(), md.atime_nsec()),
        mtime: systime(md.mtime(), md.mtime_nsec()),
        ctime: systime(md.ctime(), md.ctime_nsec()),
        crtime: systime(md.ctime(), md.ctime_nsec()),
        kind: kind_of(md),
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

impl PlainFs {
    fn new(root: PathBuf) -> PlainFs {
        let mut inodes = Inodes::default();
        inodes.by_path.insert(PathBuf::new(), 1);
        inodes.paths.push(PathBuf::new());
        PlainFs { root, inodes: Mutex::new(inodes), files: Mutex::new(HashMap::new()), next_fh: AtomicU64::new(1) }
    }

    fn rel(&self, ino: INodeNo) -> Option<PathBuf> {
        let i = self.inodes.lock().unwrap();
        i.paths.get((ino.0 as usize).checked_sub(1)?).cloned()
    }

    fn ino_for(&self, rel: &Path) -> u64 {
        let mut i = self.inodes.lock().unwrap();
        if let Some(&n) = i.by_path.get(rel) {
            return n;
        }
        i.paths.push(rel.to_path_buf());
        let n = i.paths.len() as u64;
        i.by_path.insert(rel.to_path_buf(), n);
        n
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }
}

impl Filesystem for PlainFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(p) = self.rel(parent) else { return reply.error(Errno::ENOENT) };
        let rel = p.join(name);
        match std::fs::symlink_metadata(self.full(&rel)) {
            Ok(md) => reply.entry(&TTL, &attr(self.ino_for(&rel), &md), Generation(0)),
            Err(e) => reply.error(e.into()),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(rel) = self.rel(ino) else { return reply.error(Errno::ENOENT) };
        match std::fs::symlink_metadata(self.full(&rel)) {
            Ok(md) => reply.attr(&TTL, &attr(ino.0, &md)),
            Err(e) => reply.error(e.into()),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(rel) = self.rel(ino) else { return reply.error(Errno::ENOENT) };
        match std::fs::read_link(self.full(&rel)) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e.into()),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some(rel) = self.rel(ino) else { return reply.error(Errno::ENOENT) };
        match File::open(self.full(&rel)) {
            Ok(f) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.files.lock().unwrap().insert(fh, Arc::new(f));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e.into()),
        }
    }

    fn read(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        let Some(f) = self.files.lock().unwrap().get(&fh.0).cloned() else { return reply.error(Errno::EBADF) };
        let mut buf = vec![0u8; size as usize];
        let mut n = 0;
        while n < buf.len() {
            match f.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(e.into()),
            }
        }
        reply.data(&buf[..n]);
    }

    fn release(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.files.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(rel) = self.rel(ino) else { return reply.error(Errno::ENOENT) };
        let rd = match std::fs::read_dir(self.full(&rel)) {
            Ok(rd) => rd,
            Err(e) => return reply.error(e.into()),
        };
        let parent = rel.parent().map(|p| self.ino_for(p)).unwrap_or(1);
        let mut ents = vec![(ino.0, FileType::Directory, OsStr::new(".").to_os_string()), (parent, FileType::Directory, OsStr::new("..").to_os_string())];
        let mut names: Vec<_> = rd.filter_map(Result::ok).collect();
        names.sort_by_key(|e| e.file_name()); // stable offsets across calls
        for e in names {
            let kind = e.file_type().ok().and_then(FileType::from_std).unwrap_or(FileType::RegularFile);
            ents.push((self.ino_for(&rel.join(e.file_name())), kind, e.file_name()));
        }
        for (i, (n, kind, name)) in ents.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*n), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(src), Some(mnt)) = (args.next(), args.next()) else {
        eprintln!("usage: plainfs SOURCE MOUNTPOINT [--threads N] [--no-clone-fd]");
        std::process::exit(2);
    };
    let mut threads = 4usize;
    let mut clone_fd = true;
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--threads") => threads = args.next().and_then(|v| v.to_str()?.parse().ok()).expect("--threads N"),
            Some("--no-clone-fd") => clone_fd = false,
            _ => {
                eprintln!("plainfs: unknown argument {a:?}");
                std::process::exit(2);
            }
        }
    }
    let root = std::fs::canonicalize(&src).expect("source directory");
    let mut config = Config::default();
    config.mount_options = vec![MountOption::RO, MountOption::FSName("plainfs".into()), MountOption::DefaultPermissions];
    config.n_threads = Some(threads);
    config.clone_fd = clone_fd;
    if let Err(e) = fuser::mount(PlainFs::new(root), &mnt, &config) {
        eprintln!("plainfs: {e}");
        std::process::exit(1);
    }
}
