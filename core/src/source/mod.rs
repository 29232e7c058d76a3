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

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as imp;
#[cfg(not(unix))]
mod windows;
#[cfg(not(unix))]
use windows as imp;

pub use imp::{fstat_file, SourceTree};
