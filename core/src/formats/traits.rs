//! The one interface both host formats implement, and the plain data it
//! speaks in. A leaf module: `elf/` and `pe/` depend on it (and on the
//! format-independent modules below them), never on the facade, `inspect`
//! or `resolve`, which in turn reach the formats only through it.

use std::fmt;
use std::io;
use std::sync::Arc;

use thiserror::Error;

use crate::formats::wrapper::Wrapper;
use crate::io::ReadAt;
use crate::layout::Layout;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFormat {
    Elf,
    Pe,
}

impl fmt::Display for HostFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostFormat::Elf => "ELF",
            HostFormat::Pe => "PE",
        })
    }
}

/// One wrapper of a planned binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapperRef {
    pub index: u32,
    /// Where its bundle starts, relative to the fat section.
    pub fatbin_offset: Option<u64>,
    /// Already HIPK in the input (left alone, no code objects to serve).
    pub already_kpacked: bool,
}

/// A planned transform of a host binary.
#[derive(Debug, Clone)]
pub struct HostPlan {
    pub format: HostFormat,
    pub layout: Layout,
    pub wrappers: Vec<WrapperRef>,
    /// File offset and size of the fat section in the source.
    pub fat_offset: u64,
    pub fat_size: u64,
    /// Where and why the output deliberately differs from the reference.
    pub deviations: Vec<String>,
}

/// Why a file is served unchanged.
#[derive(Debug)]
pub enum NotTransformed {
    /// Not a host binary with device code: the common case, not logged.
    Plain,
    /// A fat binary we cannot transform safely: logged once at `warn`.
    /// The refusing layer's own typed error says why.
    Refused(Arc<dyn std::error::Error + Send + Sync>),
}

impl NotTransformed {
    /// A refusal, keeping the refusing layer's typed error.
    pub fn refused(e: impl std::error::Error + Send + Sync + 'static) -> NotTransformed {
        NotTransformed::Refused(Arc::new(e))
    }
}

impl fmt::Display for NotTransformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotTransformed::Plain => f.write_str("not a fat binary"),
            NotTransformed::Refused(r) => write!(f, "{r}"),
        }
    }
}

/// A wrapper as the runtime's loader sees it after relocation: its
/// pointer (virtual address; the preferred image base for PE) and the
/// file offset that address maps to.
#[derive(Debug, Clone)]
pub struct RawWrapper {
    pub index: u32,
    pub wrapper: Wrapper,
    pub pointer: Option<u64>,
    pub pointer_offset: Option<u64>,
    /// How many bytes at `pointer_offset` are mapped from the file.
    pub mapped_len: u64,
}

/// A host binary that cannot be read the way a question needs.
#[derive(Debug, Error)]
pub enum HostError {
    #[error("not an ELF or PE file")]
    NotHost,
    #[error("not a HIP binary (no wrapper section)")]
    NoWrappers,
    /// The format's own complaint (corrupt or unsupported headers), as
    /// the format's typed error.
    #[error("{0}")]
    Format(Box<dyn std::error::Error + Send + Sync>),
    /// Reading failed (kept apart: a transient error is worth retrying).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What every host format offers the engine: parse, probe, find the device
/// code, read the wrappers as the loader would, plan the transform, and
/// describe itself for `inspect`.
pub trait HostFile: Sized {
    const FORMAT: HostFormat;

    /// Headers only.
    fn parse_host(src: &dyn ReadAt) -> Result<Self, HostError>;

    /// `Ok` for a fat binary the view transforms; the error says why not.
    fn check_fat(&self) -> Result<(), HostError>;

    /// [`HostFile::check_fat`] as the planner judges it: `Plain` for a
    /// binary served unchanged without comment (no device code, already
    /// kpacked), `Refused` for one the planner would refuse and say so.
    fn check_plan(&self) -> Result<(), NotTransformed>;

    /// File offset and size of the device-code section, if it has file
    /// bytes inside the file.
    fn fat_section(&self) -> Option<(u64, u64)>;

    /// The wrappers, as the runtime sees them once the binary is loaded.
    fn raw_wrappers(&self, src: &dyn ReadAt) -> Result<Vec<RawWrapper>, HostError>;

    /// Plans the transform with the given marker bytes.
    fn plan_transform(&self, src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed>;

    /// Headers, sections, wrappers, bundles and marker, for humans.
    fn describe(&self, out: &mut String, src: &dyn ReadAt) -> io::Result<()>;
}
