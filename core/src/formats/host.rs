//! Host binaries of either format (ELF, PE) behind one interface
//! ([`HostFile`], implemented in `elf/` and `pe/`): this facade picks the
//! format by magic, once, and everything else in the engine — the view,
//! `split`, `verify`, `inspect`, `resolve`, `archs` — asks it, never a
//! format module directly.

use std::io;

use crate::formats::elf::{self, ElfFile};
use crate::formats::pe::PeFile;
use crate::io::{is_transient, read_exact_at, ReadAt};

pub use crate::formats::traits::{HostError, HostFile, HostFormat, HostPlan, NotTransformed, RawWrapper, WrapperRef};

/// A parsed host binary of either format.
pub enum Host {
    Elf(ElfFile),
    Pe(PeFile),
}

/// Calls `$body` with the format's [`HostFile`] as `$f`: the one place the
/// engine branches per format.
macro_rules! with_format {
    ($host:expr, $f:ident => $body:expr) => {
        match $host {
            Host::Elf($f) => $body,
            Host::Pe($f) => $body,
        }
    };
}

impl Host {
    /// Parses the headers of whichever format `src` is.
    pub fn open(src: &dyn ReadAt) -> Result<Host, HostError> {
        match detect(src) {
            Some(HostFormat::Elf) => Ok(Host::Elf(ElfFile::parse_host(src)?)),
            Some(HostFormat::Pe) => Ok(Host::Pe(PeFile::parse_host(src)?)),
            None => Err(HostError::NotHost),
        }
    }

    pub fn format(&self) -> HostFormat {
        match self {
            Host::Elf(_) => HostFormat::Elf,
            Host::Pe(_) => HostFormat::Pe,
        }
    }

    pub fn check_fat(&self) -> Result<(), HostError> {
        with_format!(self, f => f.check_fat())
    }

    pub fn check_plan(&self) -> Result<(), NotTransformed> {
        with_format!(self, f => f.check_plan())
    }

    pub fn fat_section(&self) -> Option<(u64, u64)> {
        with_format!(self, f => f.fat_section())
    }

    pub fn raw_wrappers(&self, src: &dyn ReadAt) -> Result<Vec<RawWrapper>, HostError> {
        with_format!(self, f => f.raw_wrappers(src))
    }

    pub fn plan_transform(&self, src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed> {
        with_format!(self, f => f.plan_transform(src, marker))
    }

    pub fn describe(&self, out: &mut String, src: &dyn ReadAt) -> io::Result<()> {
        with_format!(self, f => f.describe(out, src))
    }
}

pub fn detect(src: &dyn ReadAt) -> Option<HostFormat> {
    let mut magic = [0u8; 4];
    read_exact_at(src, 0, &mut magic).ok()?;
    format_of(&magic)
}

fn format_of(magic: &[u8]) -> Option<HostFormat> {
    match magic {
        [0x7f, b'E', b'L', b'F', ..] => Some(HostFormat::Elf),
        [b'M', b'Z', ..] => Some(HostFormat::Pe),
        _ => None,
    }
}

/// Headers-only check: is this a fat binary that the view transforms?
/// Any failure, a failed read included, answers no (the file is served
/// unchanged); [`probe_class`] is the variant that tells a failed read apart.
pub fn probe(src: &dyn ReadAt) -> bool {
    detect(src).is_some() && Host::open(src).and_then(|h| h.check_fat()).is_ok()
}

/// What a headers-only look at a file says about how it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Served unchanged, nothing to say (not a host binary, no device
    /// code, already kpacked): planning it would answer the same.
    Plain,
    /// A fat binary the view transforms.
    Fat,
    /// A host binary whose headers the planner refuses (and logs why).
    Refused,
}

/// Files shorter than this cannot be fat binaries, so a listing need not
/// open them. ELF: the 64-byte file header, a 64-byte section header
/// (which may overlap the file header only from its padding, offset 8, on:
/// at offset 0-7 its name offset would be the fixed magic bytes, pointing
/// far past any name table), so ending at 72 or later, and the 12 bytes of
/// the name `.hip_fatbin\0`, which no constrained header field can hold:
/// at least 84 bytes even for a hand-made file. PE32+ needs more (DOS
/// header, signature, COFF and optional headers).
pub const MIN_FAT_SIZE: u64 = 80;

/// [`probe`] with the planner's three answers, telling a failed read
/// (`Err`, worth asking again later) from a file that definitely is or is
/// not a fat binary; reads past the end of the file are definite (the file
/// is short, not the disk unwell). Reading the first four bytes settles
/// almost every file; only ELF/PE files have their headers parsed.
pub fn probe_class(src: &dyn ReadAt) -> io::Result<Probe> {
    // Shorter files are neither ELF nor PE host binaries (a PE's DOS
    // header alone is 64 bytes).
    let mut head = [0u8; elf::IDENT_LEN];
    match read_exact_at(src, 0, &mut head) {
        Ok(()) => {}
        Err(e) if is_transient(&e) => return Err(e),
        Err(_) => return Ok(Probe::Plain),
    }
    if format_of(&head[..4]).is_none() || elf::is_device_code(&head) {
        return Ok(Probe::Plain);
    }
    match Host::open(src) {
        Ok(h) => Ok(match h.check_plan() {
            Ok(()) => Probe::Fat,
            Err(NotTransformed::Plain) => Probe::Plain,
            Err(NotTransformed::Refused(_)) => Probe::Refused,
        }),
        Err(HostError::Io(e)) if is_transient(&e) => Err(e),
        Err(HostError::NotHost) => Ok(Probe::Plain),
        Err(_) => Ok(Probe::Refused),
    }
}

/// Plans the transform with the given marker bytes.
pub fn plan(src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed> {
    let host = match Host::open(src) {
        Ok(h) => h,
        // Not (a supported variant of) either format: a plain file.
        Err(HostError::NotHost) => return Err(NotTransformed::Plain),
        // Looks like a host binary but its headers cannot be read: served
        // unchanged, and said so.
        Err(e) => return Err(NotTransformed::refused(e)),
    };
    host.plan_transform(src, marker)
}

/// File offset and size of the device-code section, if any.
pub fn fat_section(src: &dyn ReadAt) -> Option<(u64, u64)> {
    Host::open(src).ok()?.fat_section()
}

/// The wrappers as the runtime's loader sees them.
pub fn wrappers(src: &dyn ReadAt) -> Result<Vec<RawWrapper>, HostError> {
    Host::open(src)?.raw_wrappers(src)
}

/// `inspect`'s report on a host binary (`None`: not one).
pub fn describe(out: &mut String, src: &dyn ReadAt) -> Option<io::Result<()>> {
    let format = detect(src)?;
    Some(match Host::open(src) {
        Ok(h) => h.describe(out, src),
        Err(e) => {
            use std::fmt::Write as _;
            let _ = writeln!(out, "{format}, not parseable: {e}");
            Ok(())
        }
    })
}
