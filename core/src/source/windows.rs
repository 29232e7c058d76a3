//! Portable implementation (Windows): resolves with `symlink_metadata`
//! on every component, so a reparse point inside the tree is never
//! followed, and opens files with `FILE_FLAG_OPEN_REPARSE_POINT`, so one
//! swapped in at the last moment is opened as itself (and refused as
//! not a regular file); every opened handle's final path is checked to
//! lie beneath the root, so a directory swapped for a junction between
//! the checks and the open is caught. A component with `:` is refused: on NTFS it
//! would name an alternate data stream, which is not part of the tree.
//! File identity (`dev`, `ino`, `nlink`) comes from
//! `GetFileInformationByHandle` (volume serial number, file index), so
//! plans and cached blobs of two files never mix; `ctime` is the
//! modification time.
use super::*;

pub struct SourceTree {
    root: PathBuf,
    /// The root as the handles of files beneath it name it (see
    /// [`SourceTree::beneath`]).
    real_root: Option<PathBuf>,
}

#[cfg(not(windows))]
fn time(t: io::Result<std::time::SystemTime>) -> Time {
    match t.ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
        Some(d) => Time { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        None => Time::default(),
    }
}

/// What one query of an open handle tells.
struct HandleInfo {
    dev: u64,
    ino: u64,
    nlink: u64,
    size: u64,
    atime: Time,
    mtime: Time,
    readonly: bool,
    dir: bool,
}

fn kind_of(ft: std::fs::FileType) -> SourceKind {
    if ft.is_symlink() {
        SourceKind::Symlink
    } else if ft.is_dir() {
        SourceKind::Dir
    } else if ft.is_file() {
        SourceKind::File
    } else {
        SourceKind::Special
    }
}

fn convert(i: &HandleInfo, kind: SourceKind) -> SourceStat {
    let perm = if i.readonly { 0o444 } else { 0o644 } | if kind == SourceKind::Dir { 0o111 } else { 0 };
    SourceStat { kind, dev: i.dev, ino: i.ino, perm, nlink: i.nlink.max(1), uid: 0, gid: 0, size: i.size, atime: i.atime, mtime: i.mtime, ctime: i.mtime }
}

#[cfg(windows)]
mod os {
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::windows::ffi::OsStrExt;
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::AsRawHandle;
    use std::path::Path;
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::Storage::FileSystem::{
        GetDiskFreeSpaceExW, GetFileInformationByHandle, GetFinalPathNameByHandleW, BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_DIRECTORY,
        FILE_ATTRIBUTE_READONLY, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    };

    use super::{HandleInfo, Time};

    /// FILETIME (100 ns since 1601) as Unix time; 0 before 1970 (as
    /// the portable path does).
    fn time(t: FILETIME) -> Time {
        const UNIX_EPOCH_100NS: u64 = 116_444_736_000_000_000;
        let v = (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
        match v.checked_sub(UNIX_EPOCH_100NS) {
            Some(u) => Time { sec: (u / 10_000_000) as i64, nsec: (u % 10_000_000) as u32 * 100 },
            None => Time::default(),
        }
    }

    /// One `GetFileInformationByHandle`: identity (volume serial
    /// number, file index), links, size, times, attributes.
    pub fn info(f: &File) -> io::Result<HandleInfo> {
        // SAFETY: all-zero is a valid BY_HANDLE_FILE_INFORMATION.
        let mut i: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: the handle is open for the duration of the call and
        // `i` is a valid out pointer.
        if unsafe { GetFileInformationByHandle(f.as_raw_handle() as _, &mut i) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(HandleInfo {
            dev: u64::from(i.dwVolumeSerialNumber),
            ino: (u64::from(i.nFileIndexHigh) << 32) | u64::from(i.nFileIndexLow),
            nlink: u64::from(i.nNumberOfLinks),
            size: (u64::from(i.nFileSizeHigh) << 32) | u64::from(i.nFileSizeLow),
            atime: time(i.ftLastAccessTime),
            mtime: time(i.ftLastWriteTime),
            readonly: i.dwFileAttributes & FILE_ATTRIBUTE_READONLY != 0,
            dir: i.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0,
        })
    }

    /// A handle for metadata only (no data access, so no sharing
    /// conflicts), on the entry itself even if it is a reparse point.
    pub fn open_entry(p: &Path) -> io::Result<File> {
        OpenOptions::new().access_mode(0).custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT).open(p)
    }

    /// Opens a file for reading without following a reparse point.
    pub fn open_read(p: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).custom_flags(FILE_FLAG_OPEN_REPARSE_POINT).open(p)
    }

    /// The path the open handle really names (`\\?\C:\…`, the form
    /// `std::fs::canonicalize` gives), whatever junctions were crossed
    /// to open it.
    pub fn final_path(f: &File) -> io::Result<std::path::PathBuf> {
        use std::os::windows::ffi::OsStringExt;
        let mut buf = vec![0u16; 512];
        loop {
            // SAFETY: the handle is open; `buf` is valid for `len` u16s.
            // Flags 0: normalized name, DOS volume name.
            let n = unsafe { GetFinalPathNameByHandleW(f.as_raw_handle() as _, buf.as_mut_ptr(), buf.len() as u32, 0) } as usize;
            if n == 0 {
                return Err(io::Error::last_os_error());
            }
            if n < buf.len() {
                return Ok(std::ffi::OsString::from_wide(&buf[..n]).into());
            }
            if n > 1 << 16 {
                return Err(io::Error::other("final path too long"));
            }
            buf.resize(n + 1, 0);
        }
    }

    /// (total, free, available to the caller) bytes of the volume.
    pub fn disk_space(p: &Path) -> io::Result<(u64, u64, u64)> {
        let wide: Vec<u16> = p.as_os_str().encode_wide().chain(Some(0)).collect();
        let (mut avail, mut total, mut free) = (0u64, 0u64, 0u64);
        // SAFETY: `wide` is NUL-terminated; the out pointers are valid.
        if unsafe { GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, &mut total, &mut free) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((total, free, avail))
    }
}

#[cfg(not(windows))]
mod os {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    use super::{time, HandleInfo};

    pub fn info(f: &File) -> io::Result<HandleInfo> {
        let m = f.metadata()?;
        Ok(HandleInfo {
            dev: 0,
            ino: 0,
            nlink: 1,
            size: m.len(),
            atime: time(m.accessed()),
            mtime: time(m.modified()),
            readonly: m.permissions().readonly(),
            dir: m.is_dir(),
        })
    }

    pub fn open_entry(p: &Path) -> io::Result<File> {
        File::open(p)
    }

    pub fn open_read(p: &Path) -> io::Result<File> {
        File::open(p)
    }

    pub fn disk_space(_p: &Path) -> io::Result<(u64, u64, u64)> {
        Ok((0, 0, 0))
    }

    pub fn final_path(_f: &File) -> io::Result<std::path::PathBuf> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no final path here"))
    }
}

/// `stat` of an entry opened with [`os::open_entry`] or a file: the
/// kind (symlink or not) from std's reparse-tag aware metadata.
fn stat_file(f: &File) -> io::Result<SourceStat> {
    let kind = kind_of(f.metadata()?.file_type());
    Ok(convert(&os::info(f)?, kind))
}

impl SourceTree {
    pub fn open(root: &Path) -> io::Result<SourceTree> {
        if !std::fs::metadata(root)?.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotADirectory, "source is not a directory"));
        }
        let real_root = std::fs::canonicalize(root).ok();
        Ok(SourceTree { root: root.to_path_buf(), real_root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The real path of `rel`, checking that no component but (with
    /// `allow_last_link`) the last is a symlink or junction.
    fn resolve(&self, rel: &Path, allow_last_link: bool) -> Result<PathBuf> {
        check_relative(rel)?;
        let mut p = self.root.clone();
        let n = rel.components().count();
        for (i, c) in rel.components().enumerate() {
            if c.as_os_str().as_encoded_bytes().contains(&b':') {
                return Err(Refusal::DataStream.into());
            }
            p.push(c.as_os_str());
            if allow_last_link && i + 1 == n {
                break;
            }
            let m = std::fs::symlink_metadata(&p)?;
            if m.file_type().is_symlink() {
                return Err(Refusal::CrossesSymlink.into());
            }
        }
        Ok(p)
    }

    /// Checks that an opened handle names something beneath the root:
    /// the per-component checks of [`Self::resolve`] and the opening
    /// by path are two steps, and a directory swapped for a junction
    /// between them would be followed. The handle tells the truth.
    fn beneath(&self, f: &File) -> Result<()> {
        let Some(root) = &self.real_root else { return Ok(()) };
        match os::final_path(f) {
            Ok(p) if p.starts_with(root) => Ok(()),
            Ok(p) => Err(Refusal::OutsideSource(p).into()),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub fn stat(&self, rel: &Path) -> Result<SourceStat> {
        let f = os::open_entry(&self.resolve(rel, true)?)?;
        self.beneath(&f)?;
        Ok(stat_file(&f)?)
    }

    /// `lstat` of the entries `names` of directory `rel` (one by one here).
    pub fn stat_many(&self, rel: &Path, names: &[&OsStr]) -> Result<Vec<Result<SourceStat>>> {
        Ok(names.iter().map(|n| check_name(n).map_err(SourceError::from).and_then(|()| self.stat(&rel.join(n)))).collect())
    }

    /// Opens the regular files `names` of directory `rel` (one by one here).
    pub fn open_many(&self, rel: &Path, names: &[&OsStr]) -> Result<Vec<Result<(File, SourceStat)>>> {
        Ok(names.iter().map(|n| check_name(n).map_err(SourceError::from).and_then(|()| self.open_file(&rel.join(n)))).collect())
    }

    pub fn read_dir(&self, rel: &Path) -> Result<Vec<(OsString, Option<SourceKind>)>> {
        let mut out = Vec::new();
        let p = self.resolve(rel, false)?;
        // (Names only: a swap between this check and the listing could
        // show names from elsewhere, never contents — every entry is
        // checked again when opened.)
        self.beneath(&os::open_entry(&p)?)?;
        for e in std::fs::read_dir(&p)? {
            let e = e?;
            let kind = e.file_type().ok().map(kind_of);
            out.push((e.file_name(), kind));
        }
        Ok(out)
    }

    pub fn read_link(&self, rel: &Path) -> Result<OsString> {
        Ok(std::fs::read_link(self.resolve(rel, true)?)?.into_os_string())
    }

    pub fn open_file(&self, rel: &Path) -> Result<(File, SourceStat)> {
        let p = self.resolve(rel, false)?;
        let f = os::open_read(&p)?;
        self.beneath(&f)?;
        let st = stat_file(&f)?;
        if st.kind != SourceKind::File {
            return Err(Refusal::NotRegularFile.into());
        }
        Ok((f, st))
    }

    pub fn statfs(&self) -> io::Result<FsStats> {
        const BLOCK: u64 = 4096;
        let (total, free, avail) = os::disk_space(&self.root).unwrap_or((0, 0, 0));
        Ok(FsStats { block_size: BLOCK, blocks: total / BLOCK, blocks_free: free / BLOCK, blocks_avail: avail / BLOCK, name_max: 255, ..FsStats::default() })
    }
}

/// `fstat` of an open source file (checked on every read): one query.
/// Files are opened without following reparse points and checked to be
/// regular at open, so only directories need telling apart here.
pub fn fstat_file(f: &File) -> io::Result<SourceStat> {
    let i = os::info(f)?;
    let kind = if i.dir { SourceKind::Dir } else { SourceKind::File };
    Ok(convert(&i, kind))
}

/// No mount ids on Windows (see the Unix version's use).
pub fn mount_id(_f: &File) -> Option<u64> {
    None
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use std::fs;

    fn tree(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("kpackfs-source-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(p.join("d")).unwrap();
        p
    }

    #[test]
    fn same_size_and_time_are_still_different_files() {
        let root = tree("identity");
        fs::write(root.join("a"), b"same size").unwrap();
        fs::write(root.join("b"), b"SAME SIZE").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        for n in ["a", "b"] {
            fs::OpenOptions::new().write(true).open(root.join(n)).unwrap().set_modified(t).unwrap();
        }
        let tr = SourceTree::open(&root).unwrap();
        let (a, b) = (tr.stat(Path::new("a")).unwrap(), tr.stat(Path::new("b")).unwrap());
        assert_eq!((a.size, a.mtime), (b.size, b.mtime));
        assert_ne!(a.id(), b.id(), "file index must tell them apart");
        let (f, st) = tr.open_file(Path::new("a")).unwrap();
        assert_eq!(st.id(), a.id());
        assert_eq!(fstat_file(&f).unwrap().id(), a.id());
        assert_eq!((a.kind, tr.stat(Path::new("d")).unwrap().kind, tr.stat(Path::new("")).unwrap().kind), (SourceKind::File, SourceKind::Dir, SourceKind::Dir));
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn streams_directories_and_escapes_are_refused() {
        let root = tree("refuse");
        fs::write(root.join("f"), b"data").unwrap();
        let tr = SourceTree::open(&root).unwrap();
        // A first component `f:` is a drive prefix to Windows' path parser
        // (so "not a plain path"); a `:` later on names a data stream.
        for (rel, stream) in [("f:s", false), ("f::$DATA", false), ("d/x:y", true), ("d/f::$DATA", true)] {
            let e = tr.stat(Path::new(rel)).unwrap_err();
            let want =
                if stream { matches!(e, SourceError::Refused(Refusal::DataStream)) } else { matches!(e, SourceError::Refused(Refusal::NotPlainPath(_))) };
            assert!(want, "{rel}: {e:?}");
            assert!(tr.open_file(Path::new(rel)).is_err(), "{rel}");
        }
        assert!(tr.open_file(Path::new("d")).is_err());
        assert!(tr.stat(Path::new("../x")).is_err());
        assert!(tr.stat(Path::new("C:\\Windows")).is_err());
        assert_eq!(io::Error::from(tr.stat(Path::new("nope")).unwrap_err()).kind(), io::ErrorKind::NotFound);
        let s = tr.statfs().unwrap();
        assert!(s.blocks > 0 && s.name_max == 255, "{s:?}");
        let _ = fs::remove_dir_all(&root);
    }
}
