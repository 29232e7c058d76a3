//! `.kpack` archives (FORMATS.md §5): a 64-byte header, a blob region, and
//! a MessagePack TOC that runs to EOF.
//!
//! The writer for scheme `none` produces a [`Layout`](crate::layout::Layout)
//! whose code-object extents are plain ranges of the source fat binary, so an
//! archive of hundreds of megabytes costs a few kilobytes of memory. The
//! `zstd-per-kernel` writer and the reader exist for packagers, for
//! `kpackfs resolve`, and for compatibility tests against upstream vectors.

#[cfg(test)]
mod mutant_tests;
mod name;
mod read;
mod write;

use thiserror::Error;

pub use name::{ArchiveName, ARCH_PLACEHOLDER, KPACK_DIR, SUFFIX};
pub use read::{Archive, FrameTable};
pub use write::{compress_frame, encode_toc, ArchiveSpec, BlobData, EntrySpec};

use crate::formats::msgpack::Value;

pub const KPACK_MAGIC: &[u8; 4] = b"KPAK";
pub const KPACK_VERSION: u32 = 1;
pub const HEADER_LEN: u64 = 64;
pub const SCHEME_NONE: &str = "none";
pub const SCHEME_ZSTD: &str = "zstd-per-kernel";

#[derive(Debug, Error)]
pub enum KpackError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a kpack archive (bad magic or short header)")]
    InvalidFormat,
    #[error("unsupported kpack version {0}")]
    UnsupportedVersion(u32),
    #[error("TOC offset {offset:#x} not inside the file ({size:#x} bytes)")]
    BadTocOffset { offset: u64, size: u64 },
    #[error("TOC is not valid MessagePack: {0}")]
    Toc(String),
    #[error("TOC field {0}: {1}")]
    TocField(&'static str, String),
    #[error("no entry {key:?} for arch {arch:?}")]
    KernelNotFound { key: String, arch: String },
    #[error("blob {ordinal}: {what}")]
    BadBlob { ordinal: u64, what: String },
    #[error("zstd: {0}")]
    Decompress(String),
}

/// Compression scheme of the blob region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    /// `blobs[ordinal] = (absolute offset, size)`.
    None { blobs: Vec<(u64, u64)> },
    /// Frames in a region at `offset`, `size` bytes long.
    Zstd { offset: u64, size: u64 },
}

/// One TOC entry (binary key → arch key → this).
#[derive(Debug, Clone, PartialEq)]
pub struct TocEntry {
    pub kind: String,
    pub ordinal: u64,
    pub original_size: u64,
    /// Splitter metadata (`target`, `source_prefix`); ignored by the runtime.
    pub metadata: Option<Value>,
}

/// The decoded TOC, keeping the writer's key order (so an archive can be
/// re-written byte for byte).
#[derive(Debug, Clone, PartialEq)]
pub struct Toc {
    pub format_version: u64,
    pub group_name: String,
    pub gfx_arch_family: String,
    pub gfx_arches: Vec<String>,
    pub toc: Vec<(String, Vec<(String, TocEntry)>)>,
    pub scheme: Scheme,
}

impl Toc {
    pub fn entry(&self, key: &str, arch: &str) -> Option<&TocEntry> {
        let (_, archs) = self.toc.iter().find(|(k, _)| k == key)?;
        archs.iter().find(|(a, _)| a == arch).map(|(_, e)| e)
    }

    /// Whether the loader considers this archive to carry `arch` (only the
    /// `gfx_arches` list counts, FORMATS.md §5.2).
    pub fn has_arch(&self, arch: &str) -> bool {
        self.gfx_arches.iter().any(|a| a == arch)
    }

    pub fn scheme_name(&self) -> &'static str {
        match self.scheme {
            Scheme::None { .. } => SCHEME_NONE,
            Scheme::Zstd { .. } => SCHEME_ZSTD,
        }
    }
}
