//! The source tree on Unix: `openat2` beneath a root handle, or an
//! `O_NOFOLLOW` walk.

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
    fn dir(&self, rel: &Path) -> Result<DirFd<'_>> {
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
                Err(e) if e == rustix::io::Errno::XDEV || e == rustix::io::Errno::LOOP => return Err(Refusal::CrossesSymlink.into()),
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

    fn split(rel: &Path) -> std::result::Result<(&Path, &OsStr), Refusal> {
        match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => Ok((p, n)),
            _ => Err(Refusal::NoFileName),
        }
    }

    /// `lstat` of `rel` ("" is the root).
    pub fn stat(&self, rel: &Path) -> Result<SourceStat> {
        if rel.as_os_str().is_empty() {
            return Ok(convert(&rustix::fs::fstat(&self.root_fd)?));
        }
        let (parent, name) = Self::split(rel)?;
        let d = self.dir(parent)?;
        Ok(convert(&rustix::fs::statat(d.fd(), name, AtFlags::SYMLINK_NOFOLLOW)?))
    }

    /// `lstat` of the entries `names` of directory `rel`, the directory
    /// resolved once: a listing stats thousands of entries, and resolving
    /// each path again (an `openat2` and a `close` per entry) cost more
    /// than the stats themselves.
    pub fn stat_many(&self, rel: &Path, names: &[&OsStr]) -> Result<Vec<Result<SourceStat>>> {
        let d = self.dir(rel)?;
        Ok(names
            .iter()
            .map(|n| {
                check_name(n)?;
                Ok(convert(&rustix::fs::statat(d.fd(), *n, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)?))
            })
            .collect())
    }

    /// Opens the regular files `names` of directory `rel` (as
    /// [`SourceTree::open_file`] does each), the directory resolved once.
    pub fn open_many(&self, rel: &Path, names: &[&OsStr]) -> Result<Vec<Result<(File, SourceStat)>>> {
        let d = self.dir(rel)?;
        Ok(names.iter().map(|n| check_name(n).map_err(SourceError::from).and_then(|()| Self::open_in(d.fd(), n))).collect())
    }

    /// Entries of directory `rel` (without `.` and `..`), unsorted.
    pub fn read_dir(&self, rel: &Path) -> Result<Vec<(OsString, Option<SourceKind>)>> {
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
    pub fn read_link(&self, rel: &Path) -> Result<OsString> {
        let (parent, name) = Self::split(rel)?;
        let d = self.dir(parent)?;
        let target = rustix::fs::readlinkat(d.fd(), name, Vec::new())?;
        Ok(OsStr::from_bytes(target.as_bytes()).to_os_string())
    }

    /// Opens regular file `rel` for reading; returns it with its `fstat`.
    pub fn open_file(&self, rel: &Path) -> Result<(File, SourceStat)> {
        let (parent, name) = Self::split(rel)?;
        let d = self.dir(parent)?;
        Self::open_in(d.fd(), name)
    }

    fn open_in(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(File, SourceStat)> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(io::Error::from)?;
        let st = convert(&rustix::fs::fstat(&fd).map_err(io::Error::from)?);
        if st.kind != SourceKind::File {
            return Err(Refusal::NotRegularFile.into());
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

/// `STATX_MNT_ID_UNIQUE` (Linux 6.8): a mount id never reused in one boot
/// (the older `STATX_MNT_ID` is handed out again after an unmount).
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// The unique id of the mount `f` lies on, where the kernel gives one
/// (Linux 6.8 and later): another file system mounted in its place, even
/// on the same device, has another id.
pub fn mount_id(f: &File) -> Option<u64> {
    let want = rustix::fs::StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE);
    let st = rustix::fs::statx(f, "", AtFlags::EMPTY_PATH, want).ok()?;
    (st.stx_mask & STATX_MNT_ID_UNIQUE != 0).then_some(st.stx_mnt_id)
}
