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

use thiserror::Error;

/// Why the source layer refuses a request on its own (no OS call failed):
/// to a reader each of these is a name that does not exist, which the
/// adapters say in their own terms (ENOENT, `STATUS_OBJECT_NAME_NOT_FOUND`).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A path with `..`, `.`, a root or a prefix.
    #[error("not a plain relative path: {0}")]
    NotPlainPath(PathBuf),
    /// A name that cannot be one entry of a directory (empty, `.`, `..`,
    /// holding a separator or NUL).
    #[error("invalid file name")]
    InvalidName,
    /// A path with no last component where an entry was asked for.
    #[error("no file name")]
    NoFileName,
    /// A directory, FIFO, socket or device where a regular file was asked for.
    #[error("not a regular file")]
    NotRegularFile,
    /// A component of the path is a symlink (or junction): never followed.
    #[error("path crosses a symlink")]
    CrossesSymlink,
    /// The opened handle names something outside the source root.
    #[error("{0} lies outside the source")]
    OutsideSource(PathBuf),
    /// An NTFS alternate data stream (`name:stream`).
    #[error("alternate data streams are not served")]
    DataStream,
}

/// An error of the source layer: a refusal, or the operating system's.
#[derive(Debug, Error)]
pub enum SourceError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<SourceError> for io::Error {
    /// For callers that speak `io::Error` (the packaging tools): the kinds
    /// the source layer used before its refusals were typed.
    fn from(e: SourceError) -> io::Error {
        match e {
            SourceError::Io(e) => e,
            SourceError::Refused(r @ (Refusal::CrossesSymlink | Refusal::OutsideSource(_))) => io::Error::new(io::ErrorKind::NotFound, r),
            SourceError::Refused(r) => io::Error::new(io::ErrorKind::InvalidInput, r),
        }
    }
}

impl SourceError {
    /// Whether the entry is simply not there (or, refused on the way, as
    /// good as not there): what a lookup treats as a missing name.
    pub fn not_found(&self) -> bool {
        match self {
            SourceError::Io(e) => e.kind() == io::ErrorKind::NotFound,
            SourceError::Refused(r) => matches!(r, Refusal::CrossesSymlink | Refusal::OutsideSource(_)),
        }
    }
}

#[cfg(unix)]
impl From<rustix::io::Errno> for SourceError {
    fn from(e: rustix::io::Errno) -> SourceError {
        SourceError::Io(e.into())
    }
}

/// Results of the source layer.
pub type Result<T> = std::result::Result<T, SourceError>;

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

impl SourceId {
    /// Same file and bytes, ignoring the ctime (which also moves on chmod,
    /// link count changes and unlinking, none of which change the bytes).
    pub fn same_content(&self, other: &SourceId) -> bool {
        (self.dev, self.ino, self.size, self.mtime) == (other.dev, other.ino, other.size, other.mtime)
    }
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
pub fn check_relative(rel: &Path) -> std::result::Result<(), Refusal> {
    for c in rel.components() {
        if !matches!(c, Component::Normal(_)) {
            return Err(Refusal::NotPlainPath(rel.to_path_buf()));
        }
    }
    Ok(())
}

/// Checks one directory-entry name as received from a client.
pub fn check_name(name: &OsStr) -> std::result::Result<(), Refusal> {
    let b = name.as_encoded_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) || (cfg!(windows) && b.contains(&b'\\')) {
        return Err(Refusal::InvalidName);
    }
    Ok(())
}

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as imp;
#[cfg(not(unix))]
mod windows;
#[cfg(not(unix))]
use windows as imp;

pub use imp::{fstat_file, mount_id, SourceTree};

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// What the source layer refuses on its own comes back as a typed
    /// [`Refusal`] (once an `InvalidInput` io::Error recognised far away by
    /// its kind), and keeps its old kind for io::Error callers.
    #[test]
    fn refusals_are_typed() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::fs::write(d.path().join("real/f"), b"x").unwrap();
        std::os::unix::fs::symlink("real", d.path().join("link")).unwrap();
        let t = SourceTree::open(d.path()).unwrap();
        for rel in ["fifo", "real"] {
            let e = t.open_file(Path::new(rel)).unwrap_err();
            assert!(matches!(e, SourceError::Refused(Refusal::NotRegularFile)), "{rel}: {e:?}");
            assert_eq!(io::Error::from(e).kind(), io::ErrorKind::InvalidInput);
        }
        assert!(matches!(t.stat(Path::new("real/../real/f")), Err(SourceError::Refused(Refusal::NotPlainPath(_)))));
        assert!(matches!(t.open_file(Path::new("")), Err(SourceError::Refused(_))));
        assert_eq!(check_name(OsStr::new("a/b")), Err(Refusal::InvalidName));
        // Through a symlinked directory: refused (openat2) or the walk's
        // own ELOOP/ENOTDIR; either way a missing name to the reader.
        let e = t.stat(Path::new("link/f")).unwrap_err();
        let walk = matches!(&e, SourceError::Io(io) if matches!(io.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)));
        assert!(walk || (e.not_found() && matches!(e, SourceError::Refused(Refusal::CrossesSymlink))), "{e:?}");
        assert!(t.stat(Path::new("real/f")).is_ok());
    }
}
