//! Host binaries of either format (ELF, PE/COFF) behind one interface:
//! detect the format by magic, probe cheaply whether a file is a fat binary
//! the view should transform, and plan the transform.

use std::fmt;

use crate::elf::{self, ElfError, ElfFile};
use crate::io::{is_transient, read_exact_at, ReadAt};
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
    Refused(String),
}

impl fmt::Display for NotTransformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotTransformed::Plain => f.write_str("not a fat binary"),
            NotTransformed::Refused(r) => f.write_str(r),
        }
    }
}

pub fn detect(src: &dyn ReadAt) -> Option<HostFormat> {
    let mut magic = [0u8; 4];
    read_exact_at(src, 0, &mut magic).ok()?;
    format_of(&magic)
}

fn format_of(magic: &[u8; 4]) -> Option<HostFormat> {
    match magic {
        b"\x7fELF" => Some(HostFormat::Elf),
        [b'M', b'Z', _, _] => Some(HostFormat::Pe),
        _ => None,
    }
}

fn elf_refusal(e: ElfError) -> NotTransformed {
    match e {
        ElfError::NotElf | ElfError::NotFat | ElfError::AlreadyKpacked => NotTransformed::Plain,
        ElfError::Unsupported(ref r) if r.starts_with("e_type") => NotTransformed::Plain,
        other => NotTransformed::Refused(other.to_string()),
    }
}

/// Headers-only check: is this a fat binary that the view transforms?
pub fn probe(src: &dyn ReadAt) -> bool {
    probe_checked(src).unwrap_or(false)
}

/// [`probe`], telling a failed read (`Err`, worth asking again later) from
/// a file that definitely is or is not a fat binary. Reads past the end of
/// the file are definite: the file is short, not the disk unwell.
pub fn probe_checked(src: &dyn ReadAt) -> std::io::Result<bool> {
    let mut magic = [0u8; 4];
    match read_exact_at(src, 0, &mut magic) {
        Ok(()) => {}
        Err(e) if is_transient(&e) => return Err(e),
        Err(_) => return Ok(false),
    }
    match format_of(&magic) {
        Some(HostFormat::Elf) => match ElfFile::parse(src).and_then(|f| f.classify()) {
            Ok(()) => Ok(true),
            Err(ElfError::Io(e)) if is_transient(&e) => Err(e),
            Err(_) => Ok(false),
        },
        Some(HostFormat::Pe) => match crate::coff::PeFile::parse(src).and_then(|p| p.classify()) {
            Ok(()) => Ok(true),
            Err(crate::coff::CoffError::Io(e)) if is_transient(&e) => Err(e),
            Err(_) => Ok(false),
        },
        None => Ok(false),
    }
}

/// Plans the transform with the given marker bytes.
pub fn plan(src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed> {
    match detect(src) {
        Some(HostFormat::Elf) => {
            let file = ElfFile::parse(src).map_err(elf_refusal)?;
            file.classify().map_err(elf_refusal)?;
            let p = elf::plan(src, &file, marker).map_err(elf_refusal)?;
            Ok(HostPlan {
                format: HostFormat::Elf,
                wrappers: p
                    .wrappers
                    .iter()
                    .map(|w| WrapperRef { index: w.index, fatbin_offset: w.fatbin_offset(&p.fatbin), already_kpacked: w.already_kpacked })
                    .collect(),
                fat_offset: p.fatbin.offset,
                fat_size: p.fatbin.size,
                deviations: p.deviations.iter().map(|d| format!("{d:?}")).collect(),
                layout: p.layout,
            })
        }
        Some(HostFormat::Pe) => crate::coff::plan_host(src, marker),
        None => Err(NotTransformed::Plain),
    }
}
