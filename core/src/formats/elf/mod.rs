//! ELF host binaries: recognising HIP fat binaries and planning the kpack
//! transform (FORMATS.md §3) as a lazy [`Layout`](crate::layout::Layout).

mod headers;
mod host;
mod phdr;
pub(crate) mod relocs;
mod transform;

use std::io;

use thiserror::Error;

pub use headers::{Ehdr, Phdr, Shdr, ET_DYN, ET_EXEC};
pub use phdr::old_kernel_phdr_vaddr;
pub use transform::{plan, Deviation, ElfPlan, WrapperInfo};

use crate::io::{read_exact_at, read_vec_at, ReadAt};
use crate::layout::LayoutError;
use headers::{EHDR_SIZE, EM_AMDGPU, EM_X86_64, PHDR_SIZE, PT_INTERP, SHDR_SIZE};

pub const FATBIN_SECTION: &str = ".hip_fatbin";
pub const WRAPPER_SECTION: &str = ".hipFatBinSegment";
pub const MARKER_SECTION: &str = ".rocm_kpack_ref";

/// Section-name tables larger than this are not real.
const MAX_SHSTRTAB: u64 = 16 << 20;

/// Why a file is not transformed. Every variant means "serve it unchanged";
/// the view logs the reason once.
#[derive(Debug, Error)]
pub enum ElfError {
    #[error("not an ELF64 little-endian file")]
    NotElf,
    /// Neither an executable nor a shared object (a relocatable object, a
    /// core dump): never a fat binary the runtime loads.
    #[error("e_type {0} is not ET_EXEC/ET_DYN")]
    NotLoadable(u16),
    #[error("unsupported ELF: {0}")]
    Unsupported(String),
    #[error("no .hip_fatbin section (not a fat binary)")]
    NotFat,
    #[error("already kpack'd (has .rocm_kpack_ref)")]
    AlreadyKpacked,
    #[error("corrupt ELF: {0}")]
    Corrupt(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("layout edit failed: {0}")]
    Layout(#[from] LayoutError),
}

pub(crate) fn corrupt(what: impl Into<String>) -> ElfError {
    ElfError::Corrupt(what.into())
}

/// The parsed headers of an ELF file: enough to classify and plan it.
#[derive(Debug, Clone)]
pub struct ElfFile {
    pub len: u64,
    pub eh: Ehdr,
    pub phdrs: Vec<Phdr>,
    pub shdrs: Vec<Shdr>,
    pub shstrtab: Vec<u8>,
}

/// Bytes of a file [`is_device_code`] looks at.
pub const IDENT_LEN: usize = 20;

/// Whether `head` (a file's first [`IDENT_LEN`] bytes) starts an ELF64
/// little-endian GPU code object (`EM_AMDGPU`): device code, never a host
/// binary. Installs hold thousands of them (rocBLAS, hipBLASLt kernel
/// libraries), and a listing's probe that stops here reads one page of
/// each instead of its header tables too.
pub fn is_device_code(head: &[u8]) -> bool {
    head.len() >= IDENT_LEN && head[..4] == *b"\x7fELF" && head[4] == 2 && head[5] == 1 && u16::from_le_bytes([head[18], head[19]]) == EM_AMDGPU
}

/// Largest file position and virtual address a header may reach (x86-64
/// user space ends at 2^47; files are far below 2^62).
const MAX_FILE_POS: u64 = 1 << 62;
const MAX_VADDR: u64 = 1 << 56;

impl ElfFile {
    /// Reads the ELF header, program and section header tables and the
    /// section-name table, validating every offset against the file size.
    pub fn parse(src: &dyn ReadAt) -> Result<ElfFile, ElfError> {
        let len = src.size()?;
        if len < EHDR_SIZE {
            return Err(ElfError::NotElf);
        }
        let mut raw = [0u8; EHDR_SIZE as usize];
        read_exact_at(src, 0, &mut raw)?;
        let eh = Ehdr::parse(&raw).ok_or(ElfError::NotElf)?;
        if eh.e_type != ET_EXEC && eh.e_type != ET_DYN {
            return Err(ElfError::NotLoadable(eh.e_type));
        }
        if eh.phentsize as u64 != PHDR_SIZE && eh.phnum != 0 {
            return Err(corrupt(format!("e_phentsize {}", eh.phentsize)));
        }
        if eh.shentsize as u64 != SHDR_SIZE && eh.shnum != 0 {
            return Err(corrupt(format!("e_shentsize {}", eh.shentsize)));
        }
        if eh.shnum == 0 {
            return Err(ElfError::Unsupported("no section headers (or extended numbering)".into()));
        }
        let table = |off: u64, n: u16, size: u64, what: &str| -> Result<Vec<u8>, ElfError> {
            let bytes = n as u64 * size;
            match off.checked_add(bytes) {
                Some(end) if end <= len => Ok(read_vec_at(src, off, bytes as usize)?),
                _ => Err(corrupt(format!("{what} table {off:#x}+{bytes:#x} past end of file ({len:#x})"))),
            }
        };
        let ph_bytes = table(eh.phoff, eh.phnum, PHDR_SIZE, "program header")?;
        let phdrs = ph_bytes.chunks_exact(PHDR_SIZE as usize).filter_map(Phdr::parse).collect();
        let sh_bytes = table(eh.shoff, eh.shnum, SHDR_SIZE, "section header")?;
        let shdrs: Vec<Shdr> = sh_bytes.chunks_exact(SHDR_SIZE as usize).filter_map(Shdr::parse).collect();
        let strtab = shdrs.get(eh.shstrndx as usize).ok_or_else(|| corrupt(format!("e_shstrndx {} out of range", eh.shstrndx)))?;
        if strtab.size > MAX_SHSTRTAB || strtab.offset.checked_add(strtab.size).is_none_or(|e| e > len) {
            return Err(corrupt(".shstrtab outside the file"));
        }
        let shstrtab = read_vec_at(src, strtab.offset, strtab.size as usize)?;
        // Bounds that keep every later sum of header values (ends of
        // segments and sections, page rounding, wrapper slots) far from
        // overflow: no real x86-64 file comes near them.
        let phdrs: Vec<Phdr> = phdrs;
        for p in &phdrs {
            if p.offset.checked_add(p.filesz).is_none_or(|e| e > MAX_FILE_POS) || p.vaddr.checked_add(p.memsz).is_none_or(|e| e > MAX_VADDR) {
                return Err(corrupt(format!("segment {:#x}+{:#x} at {:#x}+{:#x} out of range", p.offset, p.filesz, p.vaddr, p.memsz)));
            }
        }
        for sh in &shdrs {
            if sh.offset.checked_add(sh.size).is_none_or(|e| e > MAX_FILE_POS) || sh.addr.checked_add(sh.size).is_none_or(|e| e > MAX_VADDR) {
                return Err(corrupt(format!("section {:#x}+{:#x} at {:#x} out of range", sh.offset, sh.size, sh.addr)));
            }
        }
        Ok(ElfFile { len, eh, phdrs, shdrs, shstrtab })
    }

    pub fn section_name(&self, sh: &Shdr) -> Option<&str> {
        let tail = self.shstrtab.get(sh.name as usize..)?;
        let end = tail.iter().position(|b| *b == 0)?;
        std::str::from_utf8(&tail[..end]).ok()
    }

    /// Index of the first section named exactly `name`.
    pub fn find_section(&self, name: &str) -> Option<usize> {
        self.shdrs.iter().position(|s| self.section_name(s) == Some(name))
    }

    /// What kind of binary this is, from headers alone.
    pub fn classify(&self) -> Result<(), ElfError> {
        if self.find_section(FATBIN_SECTION).is_none() {
            return Err(ElfError::NotFat);
        }
        if self.find_section(MARKER_SECTION).is_some() {
            return Err(ElfError::AlreadyKpacked);
        }
        if self.eh.e_machine != EM_X86_64 {
            return Err(ElfError::Unsupported(format!("machine {} (only x86-64 relocations are known)", self.eh.e_machine)));
        }
        Ok(())
    }

    /// The `.hip_fatbin` section header, if any.
    pub fn fatbin(&self) -> Option<&Shdr> {
        self.find_section(FATBIN_SECTION).and_then(|i| self.shdrs.get(i))
    }

    /// For an executable (PT_INTERP) whose program header table is mapped
    /// somewhere other than where kernels before Linux 5.18 say it is
    /// ([`old_kernel_phdr_vaddr`]): `(where they look, where it is)`. Such a
    /// program dies in ld.so before `main` on those kernels (EL8's 4.18).
    /// `None` when the rule holds, for shared libraries, and when the
    /// table is not mapped at all (nothing to compare).
    pub fn old_kernel_phdr_mismatch(&self) -> Option<(u64, u64)> {
        if !self.phdrs.iter().any(|p| p.p_type == PT_INTERP) {
            return None;
        }
        let seg = self.phdrs.iter().find(|p| p.is_load() && self.eh.phoff >= p.offset && self.eh.phoff - p.offset < p.filesz)?;
        let actual = seg.vaddr.checked_add(self.eh.phoff - seg.offset)?;
        let old = old_kernel_phdr_vaddr(&self.phdrs, self.eh.phoff)?;
        (old != actual).then_some((old, actual))
    }
}

/// Translates a virtual address to a file offset with the first program
/// header (any type, table order) whose memory image contains it, as the
/// reference does.
pub(crate) fn vaddr_to_offset(phdrs: &[Phdr], addr: u64) -> Option<u64> {
    let p = phdrs.iter().find(|p| p.contains_vaddr(addr))?;
    let delta = addr - p.vaddr;
    if delta >= p.filesz {
        return None;
    }
    p.offset.checked_add(delta)
}
