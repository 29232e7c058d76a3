//! PE/COFF host binaries (Windows `.dll`/`.exe`): recognising HIP fat
//! binaries (`.hip_fat` device code, `.hipFatB` wrappers) and planning the
//! reference kpack transform (FORMATS.md §4) as a lazy
//! [`Layout`](crate::layout::Layout).
//!
//! Steps, as the reference applies them: add a `.kpackrf` section holding
//! the marker; point every wrapper at it (the DIR64 base relocation keeps
//! working); HIPF → HIPK with the wrapper index in `reserved1`; check that
//! no base-relocated pointer still targets `.hip_fat`; drop the whole pages
//! of `.hip_fat` from the file by shrinking `SizeOfRawData` and shifting
//! later `PointerToRawData` (the loader zero-fills the rest).
//!
//! Where the reference is wrong (FORMATS.md §9.2 B7) we deviate:
//! * a trailing Authenticode certificate (security directory) is dropped —
//!   any change to the image invalidates it, and the reference would
//!   instead leave the new section's header pointing at certificate bytes;
//!   any other overlay (data read by file offset) makes us pass the file
//!   through unchanged;
//! * debug-directory entries' `PointerToRawData` are shifted with the
//!   sections they point into;
//! * a non-zero `CheckSum`, stale after the edit, is set to 0 ("none");
//! * no room for one more section header: passed through.

mod headers;
mod host;
mod transform;

use std::io;

use thiserror::Error;

pub use headers::{PeFile, Section};
pub use transform::plan;

use crate::layout::LayoutError;

pub const FAT_SECTION: &[u8; 8] = b".hip_fat";
pub const WRAPPER_SECTION: &[u8; 8] = b".hipFatB";
pub const MARKER_SECTION: &[u8; 8] = b".kpackrf";

const SECTION_HEADER: usize = 40;
const PAGE: u64 = 0x1000;
/// Largest header area we read (real ones are one or two pages).
const MAX_HEADERS: u64 = 1 << 20;
const DIR_SECURITY: usize = 4;
const DIR_BASERELOC: usize = 5;
const DIR_DEBUG: usize = 6;
/// Offsets inside the optional header (PE32+).
const OPT_CHECKSUM: usize = 64;
const OPT_SIZE_OF_IMAGE: usize = 56;
const OPT_DATA_DIRS: usize = 112;

#[derive(Debug, Error)]
pub enum PeError {
    #[error("not a PE32+ file")]
    NotPe,
    /// A PE32 (32-bit) image: only 64-bit images carry HIP code.
    #[error("not PE32+ (only 64-bit images carry HIP code)")]
    NotPe32Plus,
    #[error("no .hip_fat section (not a fat binary)")]
    NotFat,
    #[error("already kpack'd (has .kpackrf)")]
    AlreadyKpacked,
    #[error("unsupported PE: {0}")]
    Unsupported(String),
    #[error("corrupt PE: {0}")]
    Corrupt(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("layout edit failed: {0}")]
    Layout(#[from] LayoutError),
}

fn corrupt(what: impl Into<String>) -> PeError {
    PeError::Corrupt(what.into())
}
