//! The view's vocabulary: errors (mapped to errno or NTSTATUS by the adapters), its
//! configuration, node attributes, directory entries and operator counters.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use thiserror::Error;

use crate::formats::target::Selection;
use crate::layout::LayoutError;
use crate::plan::db;
use crate::source::{Refusal, SourceError, Time};

use crate::plan::{ArchiveCompression, ArchiveNaming};

/// Errors at the view boundary: each says what happened; the adapters
/// choose the answer their protocol gives for it (fs-linux's `errno.rs`,
/// fs-windows' `ntstatus.rs`).
#[derive(Debug, Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("not a symbolic link")]
    NotSymlink,
    #[error("invalid name")]
    InvalidName,
    #[error("name too long")]
    NameTooLong,
    #[error("unknown inode {0}")]
    StaleInode(u64),
    #[error("source file changed while being served: {0}")]
    Changed(String),
    /// The source layer refused the path or file on its own (a symlink on
    /// the way, a special file): to the reader, the name does not exist.
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("source I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Layout(#[from] LayoutError),
    /// A cached value (a compressed archive) could not be made or read.
    #[error("{0}")]
    Cache(#[from] crate::data_cache::CacheError),
}

impl From<SourceError> for Error {
    fn from(e: SourceError) -> Error {
        match e {
            SourceError::Refused(r) => Error::Refused(r),
            SourceError::Io(e) => Error::Io(e),
        }
    }
}

impl Error {
    /// Whether the view has already logged this failure once for the file
    /// (a damaged compressed bundle: one warning, then EIO for every read),
    /// so an adapter need not warn again on each read.
    pub fn already_reported(&self) -> bool {
        matches!(self, Error::Layout(e) if matches!(e.decode_error(), Some(crate::formats::bundle::BundleError::HashMismatch { .. })))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a view serves, and from where.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    pub source: PathBuf,
    pub selection: Selection,
    /// Bytes of decoded (decompressed) bundles kept in memory.
    pub cache_bytes: u64,
    pub naming: ArchiveNaming,
    pub compression: ArchiveCompression,
    /// Which files are database files of one architecture (built-in rules,
    /// after any the operator added).
    pub db_rules: Arc<db::Rules>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    Dir,
    File,
    Symlink,
}

/// Where a node's content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Dir,
    /// A `.kpack` directory made (or extended) by the view.
    KpackDir,
    Symlink,
    /// A source file served unchanged (`user.kpackfs.origin` keeps the
    /// value it has always had, `passthrough`; not to be confused with
    /// FUSE kernel passthrough, an adapter's way of serving any file).
    Unchanged,
    Transformed,
    Archive,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Dir => "directory",
            Origin::KpackDir => "kpack-directory",
            Origin::Symlink => "symlink",
            Origin::Unchanged => "passthrough",
            Origin::Transformed => "transformed",
            Origin::Archive => "archive",
        })
    }
}

/// Attributes of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: NodeType,
    pub origin: Origin,
    /// Bytes served (what `read` returns in total).
    pub size: u64,
    pub perm: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: OsString,
    pub ino: u64,
    pub kind: NodeType,
}

/// Operator counters (also exposed as an xattr on the mount root).
#[derive(Debug, Default)]
pub struct Stats {
    pub lookups: AtomicU64,
    pub opens: AtomicU64,
    pub reads: AtomicU64,
    pub bytes_served: AtomicU64,
    pub plans_built: AtomicU64,
    pub plans_refused: AtomicU64,
    /// Files opened to tell whether they are fat binaries (see
    /// `View::fat_files`): what a warm cache directory saves.
    pub probes_run: AtomicU64,
    /// Opens served from a local copy ([`StatsSnapshot::copies_used`]).
    pub copies_used: AtomicU64,
    /// Local copies queued for writing ([`StatsSnapshot::copies_queued`]).
    pub copies_queued: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub lookups: u64,
    pub opens: u64,
    pub reads: u64,
    pub bytes_served: u64,
    pub plans_built: u64,
    pub plans_refused: u64,
    /// Files opened to probe them ([`Stats::probes_run`]).
    pub probes_run: u64,
    /// Opens of synthesized files served from their local copy (by the
    /// kernel, with passthrough): what the copies buy.
    pub copies_used: u64,
    /// Local copies queued for the background writer: what they cost.
    pub copies_queued: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub cache_bytes: u64,
    pub cache_limit: u64,
    /// Inodes in the table (what the kernel holds, and the root).
    pub inodes: u64,
    /// Plans held (at most one per source path in use, plus versions still
    /// being planned): with `inodes`, what shows memory follows the live
    /// set rather than every version ever seen.
    pub plans: u64,
    /// Probe results held (one per source path probed; per version before
    /// a95c1a6, when a file replaced again and again grew it each time).
    pub probes: u64,
    /// Version tags the memory cache remembers as retired (a bounded ring
    /// of at most 1024: versions replaced lately).
    pub retired_tags: u64,
    /// Disk cache counters, when the view has a cache directory.
    pub disk: Option<DiskSnapshot>,
}

/// Counters of the disk cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub damaged: u64,
    pub checked: u64,
}

impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "lookups {}", self.lookups)?;
        writeln!(f, "opens {}", self.opens)?;
        writeln!(f, "reads {}", self.reads)?;
        writeln!(f, "bytes_served {}", self.bytes_served)?;
        writeln!(f, "plans_built {}", self.plans_built)?;
        writeln!(f, "plans_refused {}", self.plans_refused)?;
        writeln!(f, "probes_run {}", self.probes_run)?;
        writeln!(f, "copies_used {}", self.copies_used)?;
        writeln!(f, "copies_queued {}", self.copies_queued)?;
        writeln!(f, "cache_hits {}", self.cache_hits)?;
        writeln!(f, "cache_misses {}", self.cache_misses)?;
        writeln!(f, "cache_evictions {}", self.cache_evictions)?;
        writeln!(f, "cache_bytes {}", self.cache_bytes)?;
        writeln!(f, "cache_limit {}", self.cache_limit)?;
        writeln!(f, "inodes {}", self.inodes)?;
        writeln!(f, "plans {}", self.plans)?;
        writeln!(f, "probes {}", self.probes)?;
        writeln!(f, "retired_tags {}", self.retired_tags)?;
        if let Some(d) = &self.disk {
            writeln!(f, "disk_hits {}", d.hits)?;
            writeln!(f, "disk_misses {}", d.misses)?;
            writeln!(f, "disk_evictions {}", d.evictions)?;
            writeln!(f, "disk_damaged {}", d.damaged)?;
            writeln!(f, "disk_checked {}", d.checked)?;
        }
        Ok(())
    }
}
