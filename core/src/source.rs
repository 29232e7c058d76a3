//! Read-only access to the source tree that can never escape it.
//!
//! Every path is resolved relative to a directory handle of the source root
//! without following symlinks (Linux: `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, falling back to a component-by-component
//! `O_NOFOLLOW` walk where `openat2` is unavailable or filtered). So a
//! directory swapped for a symlink to `/` between two requests yields an
//! error, not a read outside SOURCE. Files are opened `O_NOFOLLOW |
//! O_NONBLOCK` and checked to be regular, so a FIFO or device never blocks
//! or gets read.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Kind of a source entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    File,
    Dir,
    Symlink,
    /// FIFO, socket, device: never exposed, never opened.
    Special,
}

/// Seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// `lstat` of a source entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStat {
    pub kind: SourceKind,
    pub dev: u64,
    pub ino: u64,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

/// Identity of one version of a source file: a plan made for one identity
/// is never used for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: Time,
    pub ctime: Time,
}

impl SourceStat {
    pub fn id(&self) -> SourceId {
        SourceId { dev: self.dev, ino: self.ino, size: self.size, mtime: self.mtime, ctime: self.ctime }
    }
}

/// Filesystem statistics of the source.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStats {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u64,
}

/// Checks that `rel` is a plain relative path (no `..`, `.`, root or prefix).
pub fn check_relative(rel: &Path) -> io::Result<()> {
    for c in rel.components() {
        if !matches!(c, Component::Normal(_)) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a plain relative path: {}", rel.display())));
        }
    }
    Ok(())
}

/// Checks one directory-entry name as received from a client.
pub fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_encoded_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) || (cfg!(windows) && b.contains(&b'\\')) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "invalid file name"));
    }
    Ok(())
}

pub use imp::SourceTree;

#[cfg(unix)]
mod imp {
    use super::*;
    use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The source root and a handle on it.
    pub struct SourceTree {
        root: PathBuf,
        root_fd: OwnedFd,
        /// `openat2` failed with ENOSYS/EPERM once: walk components instead.
        no_openat2: AtomicBool,
    }

    fn time(sec: i64, nsec: i64) -> Time {
        Time { sec, nsec: nsec.clamp(0, 999_999_999) as u32 }
    }

    fn convert(st: &rustix::fs::Stat) -> SourceStat {
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => SourceKind::File,
            FileType::Directory => SourceKind::Dir,
            FileType::Symlink => SourceKind::Symlink,
            _ => SourceKind::Special,
        };
        SourceStat {
            kind,
            dev: st.st_dev,
            ino: st.st_ino,
            perm: st.st_mode & 0o7777,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size.max(0) as u64,
            atime: time(st.st_atime, st.st_atime_nsec as i64),
            mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
            ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
        }
    }

    enum DirFd<'a> {
        Root(BorrowedFd<'a>),
        Owned(OwnedFd),
    }

    impl DirFd<'_> {
        fn fd(&self) -> BorrowedFd<'_> {
            match self {
                DirFd::Root(b) => *b,
                DirFd::Owned(o) => o.as_fd(),
            }
        }
    }

    impl SourceTree {
        pub fn open(root: &Path) -> io::Result<SourceTree> {
            let root_fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            Ok(SourceTree { root: root.to_path_buf(), root_fd, no_openat2: AtomicBool::new(false) })
        }

        pub fn root(&self) -> &Path {
            &self.root
        }

        /// Opens directory `rel` (relative to the root) without following
        /// any symlink on the way.
        fn dir(&self, rel: &Path) -> io::Result<DirFd<'_>> {
            check_relative(rel)?;
            if rel.as_os_str().is_empty() {
                return Ok(DirFd::Root(self.root_fd.as_fd()));
            }
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            if !self.no_openat2.load(Ordering::Relaxed) {
                let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
                match rustix::fs::openat2(&self.root_fd, rel, flags, Mode::empty(), how) {
                    Ok(fd) => return Ok(DirFd::Owned(fd)),
                    Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
                        log::info!("openat2 unavailable ({e}); resolving paths component by component");
                        self.no_openat2.store(true, Ordering::Relaxed);
                    }
                    Err(e) if e == rustix::io::Errno::XDEV || e == rustix::io::Errno::LOOP => {
                        return Err(io::Error::new(io::ErrorKind::NotFound, "path crosses a symlink"))
                    }
                    // Deeper than PATH_MAX: walk it component by component.
                    Err(e) if e == rustix::io::Errno::NAMETOOLONG => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let mut cur = DirFd::Root(self.root_fd.as_fd());
            for c in rel.components() {
                let fd = rustix::fs::openat(cur.fd(), c.as_os_str(), flags, Mode::empty())?;
                cur = DirFd::Owned(fd);
            }
            Ok(cur)
        }

        fn split(rel: &Path) -> io::Result<(&Path, &OsStr)> {
            match (rel.parent(), rel.file_name()) {
                (Some(p), Some(n)) => Ok((p, n)),
                _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name")),
            }
        }

        /// `lstat` of `rel` ("" is the root).
        pub fn stat(&self, rel: &Path) -> io::Result<SourceStat> {
            if rel.as_os_str().is_empty() {
                return Ok(convert(&rustix::fs::fstat(&self.root_fd)?));
            }
            let (parent, name) = Self::split(rel)?;
            let d = self.dir(parent)?;
            Ok(convert(&rustix::fs::statat(d.fd(), name, AtFlags::SYMLINK_NOFOLLOW)?))
        }

        /// Entries of directory `rel` (without `.` and `..`), unsorted.
        pub fn read_dir(&self, rel: &Path) -> io::Result<Vec<(OsString, Option<SourceKind>)>> {
            let d = self.dir(rel)?;
            let fd = rustix::fs::openat(d.fd(), ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            let mut dir = Dir::read_from(&fd)?;
            let mut out = Vec::new();
            while let Some(e) = dir.read() {
                let e = e?;
                let name = e.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let kind = match e.file_type() {
                    FileType::RegularFile => Some(SourceKind::File),
                    FileType::Directory => Some(SourceKind::Dir),
                    FileType::Symlink => Some(SourceKind::Symlink),
                    FileType::Unknown => None,
                    _ => Some(SourceKind::Special),
                };
                out.push((OsStr::from_bytes(name).to_os_string(), kind));
            }
            Ok(out)
        }

        /// The link text of symlink `rel`, unchanged.
        pub fn read_link(&self, rel: &Path) -> io::Result<OsString> {
            let (parent, name) = Self::split(rel)?;
            let d = self.dir(parent)?;
            let target = rustix::fs::readlinkat(d.fd(), name, Vec::new())?;
            Ok(OsStr::from_bytes(target.as_bytes()).to_os_string())
        }

        /// Opens regular file `rel` for reading; returns it with its `fstat`.
        pub fn open_file(&self, rel: &Path) -> io::Result<(File, SourceStat)> {
            let (parent, name) = Self::split(rel)?;
            let d = self.dir(parent)?;
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
            let fd = rustix::fs::openat(d.fd(), name, flags, Mode::empty())?;
            let st = convert(&rustix::fs::fstat(&fd)?);
            if st.kind != SourceKind::File {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
            }
            Ok((File::from(fd), st))
        }

        pub fn statfs(&self) -> io::Result<FsStats> {
            let s = rustix::fs::fstatvfs(&self.root_fd)?;
            Ok(FsStats {
                block_size: s.f_frsize.max(1),
                blocks: s.f_blocks,
                blocks_free: s.f_bfree,
                blocks_avail: s.f_bavail,
                files: s.f_files,
                files_free: s.f_ffree,
                name_max: s.f_namemax,
            })
        }
    }

    /// `fstat` of an open source file, for staleness checks.
    pub fn fstat_file(f: &File) -> io::Result<SourceStat> {
        Ok(convert(&rustix::fs::fstat(f)?))
    }
}

#[cfg(not(unix))]
mod imp {
    //! Portable implementation (Windows): resolves with `symlink_metadata`
    //! on every component, so a reparse point inside the tree is never
    //! followed.
    use super::*;
    use std::time::UNIX_EPOCH;

    pub struct SourceTree {
        root: PathBuf,
    }

    fn time(t: io::Result<std::time::SystemTime>) -> Time {
        match t.ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
            Some(d) => Time { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
            None => Time::default(),
        }
    }

    fn convert(m: &std::fs::Metadata) -> SourceStat {
        let ft = m.file_type();
        let kind = if ft.is_symlink() {
            SourceKind::Symlink
        } else if ft.is_dir() {
            SourceKind::Dir
        } else if ft.is_file() {
            SourceKind::File
        } else {
            SourceKind::Special
        };
        let perm = if m.permissions().readonly() { 0o444 } else { 0o644 } | if kind == SourceKind::Dir { 0o111 } else { 0 };
        let mtime = time(m.modified());
        SourceStat {
            kind,
            dev: 0,
            ino: 0,
            perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: m.len(),
            atime: time(m.accessed()),
            mtime,
            ctime: mtime,
        }
    }

    impl SourceTree {
        pub fn open(root: &Path) -> io::Result<SourceTree> {
            if !std::fs::metadata(root)?.is_dir() {
                return Err(io::Error::new(io::ErrorKind::NotADirectory, "source is not a directory"));
            }
            Ok(SourceTree { root: root.to_path_buf() })
        }

        pub fn root(&self) -> &Path {
            &self.root
        }

        fn resolve(&self, rel: &Path, allow_last_link: bool) -> io::Result<PathBuf> {
            check_relative(rel)?;
            let mut p = self.root.clone();
            let n = rel.components().count();
            for (i, c) in rel.components().enumerate() {
                p.push(c.as_os_str());
                let m = std::fs::symlink_metadata(&p)?;
                if m.file_type().is_symlink() && !(allow_last_link && i + 1 == n) {
                    return Err(io::Error::new(io::ErrorKind::NotFound, "path crosses a symlink"));
                }
            }
            Ok(p)
        }

        pub fn stat(&self, rel: &Path) -> io::Result<SourceStat> {
            Ok(convert(&std::fs::symlink_metadata(self.resolve(rel, true)?)?))
        }

        pub fn read_dir(&self, rel: &Path) -> io::Result<Vec<(OsString, Option<SourceKind>)>> {
            let mut out = Vec::new();
            for e in std::fs::read_dir(self.resolve(rel, false)?)? {
                let e = e?;
                let kind = e.file_type().ok().map(|ft| {
                    if ft.is_symlink() {
                        SourceKind::Symlink
                    } else if ft.is_dir() {
                        SourceKind::Dir
                    } else if ft.is_file() {
                        SourceKind::File
                    } else {
                        SourceKind::Special
                    }
                });
                out.push((e.file_name(), kind));
            }
            Ok(out)
        }

        pub fn read_link(&self, rel: &Path) -> io::Result<OsString> {
            Ok(std::fs::read_link(self.resolve(rel, true)?)?.into_os_string())
        }

        pub fn open_file(&self, rel: &Path) -> io::Result<(File, SourceStat)> {
            let p = self.resolve(rel, false)?;
            let f = File::open(p)?;
            let st = convert(&f.metadata()?);
            if st.kind != SourceKind::File {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
            }
            Ok((f, st))
        }

        pub fn statfs(&self) -> io::Result<FsStats> {
            Ok(FsStats { block_size: 4096, name_max: 255, ..FsStats::default() })
        }
    }

    pub fn fstat_file(f: &File) -> io::Result<SourceStat> {
        Ok(convert(&f.metadata()?))
    }
}

pub use imp::fstat_file;
