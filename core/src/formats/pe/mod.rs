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

use std::io;

use object::pe::{ImageDosHeader, ImageNtHeaders64, ImageSectionHeader};
use object::pod;
use object::LittleEndian as LE;
use thiserror::Error;

use crate::formats::traits::{HostFormat, HostPlan, WrapperRef};
use crate::formats::wrapper::{Wrapper, WrapperKind, MAGIC_HIPK, WRAPPER_SIZE};
use crate::io::{read_exact_at, read_vec_at, LeBytes, ReadAt};
use crate::layout::{Layout, LayoutError};

pub const FAT_SECTION: &[u8; 8] = b".hip_fat";
pub const WRAPPER_SECTION: &[u8; 8] = b".hipFatB";
pub const MARKER_SECTION: &[u8; 8] = b".kpackrf";
mod host;

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
pub enum CoffError {
    #[error("not a PE32+ file")]
    NotPe,
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

fn corrupt(what: impl Into<String>) -> CoffError {
    CoffError::Corrupt(what.into())
}

/// One section header, with the bytes we do not interpret kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: [u8; 8],
    pub virtual_size: u32,
    pub virtual_address: u32,
    pub size_of_raw_data: u32,
    pub pointer_to_raw_data: u32,
    pub characteristics: u32,
    raw: [u8; SECTION_HEADER],
}

impl Section {
    fn parse(b: &[u8]) -> Option<Section> {
        let (s, _) = pod::from_bytes::<ImageSectionHeader>(b).ok()?;
        let mut raw = [0u8; SECTION_HEADER];
        raw.copy_from_slice(b.get(..SECTION_HEADER)?);
        Some(Section {
            name: s.name,
            virtual_size: s.virtual_size.get(LE),
            virtual_address: s.virtual_address.get(LE),
            size_of_raw_data: s.size_of_raw_data.get(LE),
            pointer_to_raw_data: s.pointer_to_raw_data.get(LE),
            characteristics: s.characteristics.get(LE).0,
            raw,
        })
    }

    fn new(name: &[u8; 8], virtual_size: u32, virtual_address: u32, size_of_raw_data: u32, pointer_to_raw_data: u32, characteristics: u32) -> Section {
        Section { name: *name, virtual_size, virtual_address, size_of_raw_data, pointer_to_raw_data, characteristics, raw: [0; SECTION_HEADER] }
    }

    fn to_bytes(&self) -> [u8; SECTION_HEADER] {
        let mut b = self.raw;
        if let Ok((s, _)) = pod::from_bytes_mut::<ImageSectionHeader>(&mut b) {
            s.name = self.name;
            s.virtual_size.set(LE, self.virtual_size);
            s.virtual_address.set(LE, self.virtual_address);
            s.size_of_raw_data.set(LE, self.size_of_raw_data);
            s.pointer_to_raw_data.set(LE, self.pointer_to_raw_data);
            s.characteristics.set(LE, object::pe::SectionFlags(self.characteristics));
        }
        b
    }

    pub fn name_str(&self) -> String {
        let end = self.name.iter().position(|b| *b == 0).unwrap_or(8);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    fn raw_end(&self) -> u64 {
        self.pointer_to_raw_data as u64 + self.size_of_raw_data as u64
    }

    fn virt_end(&self) -> u64 {
        self.virtual_address as u64 + self.virtual_size as u64
    }
}

/// The parsed headers of a PE32+ file.
#[derive(Debug, Clone)]
pub struct PeFile {
    pub len: u64,
    /// `[0, SizeOfHeaders)` of the file.
    pub headers: Vec<u8>,
    pub opt_off: usize,
    pub sect_off: usize,
    pub image_base: u64,
    pub section_alignment: u32,
    pub file_alignment: u32,
    pub size_of_headers: u32,
    pub sections: Vec<Section>,
    /// Data directories as (RVA or file offset, size).
    pub dirs: Vec<(u32, u32)>,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl PeFile {
    pub fn parse(src: &dyn ReadAt) -> Result<PeFile, CoffError> {
        let len = src.size()?;
        if len < 64 {
            return Err(CoffError::NotPe);
        }
        let mut dos = [0u8; 64];
        read_exact_at(src, 0, &mut dos)?;
        let (d, _) = pod::from_bytes::<ImageDosHeader>(&dos).map_err(|_| CoffError::NotPe)?;
        if d.e_magic.get(LE) != object::pe::IMAGE_DOS_SIGNATURE {
            return Err(CoffError::NotPe);
        }
        let nt_off = d.e_lfanew.get(LE) as u64;
        let nt_size = std::mem::size_of::<ImageNtHeaders64>() as u64;
        if nt_off.checked_add(nt_size).is_none_or(|e| e > len) {
            return Err(corrupt("NT headers past end of file"));
        }
        let nt_bytes = read_vec_at(src, nt_off, nt_size as usize)?;
        let (nt, _) = pod::from_bytes::<ImageNtHeaders64>(&nt_bytes).map_err(|_| CoffError::NotPe)?;
        if nt.signature.get(LE) != object::pe::IMAGE_NT_SIGNATURE {
            return Err(CoffError::NotPe);
        }
        let opt = &nt.optional_header;
        if opt.magic.get(LE) != object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC {
            return Err(CoffError::Unsupported("not PE32+ (only 64-bit images carry HIP code)".into()));
        }
        let size_of_headers = opt.size_of_headers.get(LE);
        let file_alignment = opt.file_alignment.get(LE);
        let section_alignment = opt.section_alignment.get(LE);
        if !file_alignment.is_power_of_two() || !section_alignment.is_power_of_two() || file_alignment < 0x200 || section_alignment < file_alignment {
            return Err(corrupt(format!("alignments file {file_alignment:#x} / section {section_alignment:#x}")));
        }
        if size_of_headers as u64 > len.min(MAX_HEADERS) {
            return Err(corrupt(format!("SizeOfHeaders {size_of_headers:#x} past end of file")));
        }
        let headers = read_vec_at(src, 0, size_of_headers as usize)?;
        let opt_off = nt_off as usize + 24;
        let fh = &nt.file_header;
        let nsect = fh.number_of_sections.get(LE) as usize;
        let sect_off = opt_off + fh.size_of_optional_header.get(LE) as usize;
        let sect_end = sect_off + nsect * SECTION_HEADER;
        if sect_end > headers.len() {
            return Err(corrupt("section table outside the headers"));
        }
        let sections: Vec<Section> = headers[sect_off..sect_end].chunks_exact(SECTION_HEADER).filter_map(Section::parse).collect();
        let ndirs = (opt.number_of_rva_and_sizes.get(LE) as usize).min(16);
        let mut dirs = Vec::with_capacity(ndirs);
        for i in 0..ndirs {
            let o = opt_off + OPT_DATA_DIRS + 8 * i;
            match (headers.u32_at(o), headers.u32_at(o + 4)) {
                (Some(a), Some(s)) if o + 8 <= sect_off => dirs.push((a, s)),
                _ => break,
            }
        }
        let pe =
            PeFile { len, headers, opt_off, sect_off, image_base: opt.image_base.get(LE), section_alignment, file_alignment, size_of_headers, sections, dirs };
        pe.validate()?;
        Ok(pe)
    }

    /// Rejects section tables a loader would: raw data past EOF, overlapping
    /// raw or virtual ranges.
    fn validate(&self) -> Result<(), CoffError> {
        let mut raw: Vec<(u64, u64)> = Vec::new();
        let mut virt: Vec<(u64, u64)> = Vec::new();
        for s in &self.sections {
            if s.size_of_raw_data > 0 {
                if s.raw_end() > self.len {
                    return Err(corrupt(format!("section {} raw data past end of file", s.name_str())));
                }
                if (s.pointer_to_raw_data as u64) < self.size_of_headers as u64 {
                    return Err(corrupt(format!("section {} raw data inside the headers", s.name_str())));
                }
                raw.push((s.pointer_to_raw_data as u64, s.raw_end()));
            }
            virt.push((s.virtual_address as u64, s.virt_end().max(s.virtual_address as u64 + 1)));
        }
        for v in [&mut raw, &mut virt] {
            v.sort();
            if v.windows(2).any(|w| w[0].1 > w[1].0) {
                return Err(corrupt("overlapping sections"));
            }
        }
        Ok(())
    }

    pub fn section(&self, name: &[u8; 8]) -> Option<(usize, &Section)> {
        self.sections.iter().enumerate().find(|(_, s)| &s.name == name)
    }

    /// FORMATS.md §4: the first section whose virtual range holds `rva` and
    /// whose raw data covers it.
    pub fn rva_to_off(&self, rva: u64) -> Option<u64> {
        let s = self.sections.iter().find(|s| {
            let va = s.virtual_address as u64;
            rva >= va && rva < s.virt_end() && s.size_of_raw_data > 0 && rva - va < s.size_of_raw_data as u64
        })?;
        Some(s.pointer_to_raw_data as u64 + rva - s.virtual_address as u64)
    }

    /// Bytes of the file mapped from `rva` to the end of its section's raw data.
    fn mapped_after(&self, rva: u64) -> u64 {
        self.sections
            .iter()
            .find(|s| rva >= s.virtual_address as u64 && rva < s.virt_end())
            .map(|s| (s.size_of_raw_data.min(s.virtual_size) as u64).saturating_sub(rva - s.virtual_address as u64))
            .unwrap_or(0)
    }

    fn dir(&self, i: usize) -> (u32, u32) {
        self.dirs.get(i).copied().unwrap_or((0, 0))
    }

    pub fn classify(&self) -> Result<(), CoffError> {
        if self.section(FAT_SECTION).is_none() {
            return Err(CoffError::NotFat);
        }
        if self.section(MARKER_SECTION).is_some() {
            return Err(CoffError::AlreadyKpacked);
        }
        Ok(())
    }

    /// File offset and in-file size of `.hip_fat`.
    pub fn fat_range(&self) -> Option<(u64, u64)> {
        let (_, s) = self.section(FAT_SECTION)?;
        (s.size_of_raw_data > 0).then(|| (s.pointer_to_raw_data as u64, s.size_of_raw_data.min(s.virtual_size) as u64))
    }

    /// The wrappers: (index, wrapper, file offset of the wrapper).
    fn wrappers(&self, src: &dyn ReadAt) -> Result<Vec<(u32, Wrapper, u64)>, CoffError> {
        let (_, seg) = self.section(WRAPPER_SECTION).ok_or_else(|| corrupt("no .hipFatB section"))?;
        if !(seg.virtual_size as u64).is_multiple_of(WRAPPER_SIZE) || seg.size_of_raw_data < seg.virtual_size {
            return Err(corrupt(format!(".hipFatB virtual size {:#x} / raw {:#x}", seg.virtual_size, seg.size_of_raw_data)));
        }
        let n = seg.virtual_size as u64 / WRAPPER_SIZE;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let rva = seg.virtual_address as u64 + WRAPPER_SIZE * i;
            let off = self.rva_to_off(rva).ok_or_else(|| corrupt(format!("wrapper {i} not in the file")))?;
            let mut b = [0u8; 24];
            read_exact_at(src, off, &mut b)?;
            let w = Wrapper::parse(&b).ok_or_else(|| corrupt("short wrapper"))?;
            out.push((i as u32, w, off));
        }
        Ok(out)
    }

    /// Base relocation targets (RVA, type) from the `.reloc` directory.
    fn base_relocs(&self, src: &dyn ReadAt) -> Result<Vec<(u64, u16)>, CoffError> {
        let (rva, size) = self.dir(DIR_BASERELOC);
        if rva == 0 || size == 0 {
            return Ok(Vec::new());
        }
        let off = self.rva_to_off(rva as u64).ok_or_else(|| corrupt("base relocations not in the file"))?;
        if off.checked_add(size as u64).is_none_or(|e| e > self.len) {
            return Err(corrupt("base relocations past end of file"));
        }
        let b = read_vec_at(src, off, size as usize)?;
        let mut out = Vec::new();
        let mut pos = 0usize;
        while pos + 8 <= b.len() {
            let page = b.u32_at(pos).unwrap_or(0) as u64;
            let block = b.u32_at(pos + 4).unwrap_or(0) as usize;
            if block < 8 || pos + block > b.len() {
                return Err(corrupt("malformed base relocation block"));
            }
            for e in b[pos + 8..pos + block].chunks_exact(2) {
                let v = u16::from_le_bytes([e[0], e[1]]);
                let (ty, off) = (v >> 12, (v & 0xfff) as u64);
                if ty != 0 {
                    out.push((page + off, ty));
                }
            }
            pos += block;
        }
        Ok(out)
    }
}

/// The transform of FORMATS.md §4 (with the deviations in the module doc).
pub fn plan(src: &dyn ReadAt, pe: &PeFile, marker: &[u8]) -> Result<HostPlan, CoffError> {
    let (fat_idx, fat) = pe.section(FAT_SECTION).map(|(i, s)| (i, s.clone())).ok_or(CoffError::NotFat)?;
    let nsect = pe.sections.len();
    let table_end = pe.sect_off + SECTION_HEADER * nsect;
    if table_end + SECTION_HEADER > pe.size_of_headers as usize {
        return Err(CoffError::Unsupported("no room in the headers for one more section header".into()));
    }
    let mut headers = pe.headers.clone();
    let mut sections = pe.sections.clone();
    let mut deviations = Vec::new();
    let fa = pe.file_alignment as u64;
    let sa = pe.section_alignment as u64;

    // Overlay after the last section: an Authenticode certificate is dropped
    // (the edit invalidates it anyway); anything else is left alone.
    let raw_end = sections.iter().filter(|s| s.size_of_raw_data > 0).map(Section::raw_end).max().unwrap_or(pe.size_of_headers as u64);
    let mut body_len = pe.len;
    if pe.len > raw_end {
        let (cert_off, cert_size) = pe.dir(DIR_SECURITY);
        let cert_end = cert_off as u64 + cert_size as u64;
        if cert_size > 0 && cert_off as u64 >= raw_end && cert_end == pe.len {
            body_len = raw_end;
            let o = pe.opt_off + OPT_DATA_DIRS + 8 * DIR_SECURITY;
            headers[o..o + 8].fill(0);
            deviations.push("dropped the Authenticode certificate (invalid after any change)".to_string());
        } else {
            return Err(CoffError::Unsupported(format!("{} bytes of trailing data after the last section", pe.len - raw_end)));
        }
    }
    let mut buf = Layout::passthrough(pe.len);
    if body_len < pe.len {
        buf.delete(body_len, pe.len - body_len)?;
    }

    // Step 2: the marker section.
    let file_off = align_up(raw_end, fa);
    let rva = align_up(sections.iter().map(Section::virt_end).max().unwrap_or(0), sa);
    let c_len = marker.len() as u64;
    let raw = align_up(c_len, fa);
    let (Ok(file_off32), Ok(rva32), Ok(raw32), Ok(c32)) = (u32::try_from(file_off), u32::try_from(rva), u32::try_from(raw), u32::try_from(c_len)) else {
        return Err(CoffError::Unsupported("image too large for another section".into()));
    };
    if buf.len() < file_off {
        buf.push_zeros(file_off - buf.len());
    }
    let mut content = marker.to_vec();
    content.resize(raw as usize, 0);
    buf.push_bytes(content);
    sections.push(Section::new(MARKER_SECTION, c32, rva32, raw32, file_off32, 0x4000_0040));
    let size_of_image = rva + align_up(c_len, sa);
    let marker_va = pe.image_base.wrapping_add(rva);

    // Steps 3 and 4: wrappers point at the marker; HIPF → HIPK + index.
    let fat_rva = fat.virtual_address as u64;
    let mut wrappers = Vec::new();
    for (i, w, off) in pe.wrappers(src)? {
        let target = w.binary.wrapping_sub(pe.image_base);
        let fatbin_offset = (target >= fat_rva && target - fat_rva < fat.virtual_size as u64).then(|| target - fat_rva);
        buf.write_at(off + 8, &marker_va.to_le_bytes())?;
        match w.kind() {
            WrapperKind::Kpacked => {
                wrappers.push(WrapperRef { index: i, fatbin_offset: None, already_kpacked: true });
                continue;
            }
            WrapperKind::Fat => {}
            WrapperKind::Other(m) => return Err(corrupt(format!("wrapper {i} has magic {m:#010x}"))),
        }
        buf.write_at(off, &MAGIC_HIPK.to_le_bytes())?;
        buf.write_at(off + 16, &i.to_le_bytes())?;
        wrappers.push(WrapperRef { index: i, fatbin_offset, already_kpacked: false });
    }

    // Step 5: no base-relocated pointer may still target `.hip_fat`.
    for (rva, ty) in pe.base_relocs(src)? {
        let width = match ty {
            10 => 8, // DIR64
            3 => 4,  // HIGHLOW
            _ => continue,
        };
        let Some(off) = pe.rva_to_off(rva) else { continue };
        if off + width > buf.len() {
            continue;
        }
        let b = buf.read_vec(off, width as usize, src)?;
        let va = if width == 8 { b.u64_at(0).unwrap_or(0) } else { b.u32_at(0).unwrap_or(0) as u64 };
        let t = va.wrapping_sub(pe.image_base);
        if t >= fat_rva && t - fat_rva < fat.virtual_size as u64 {
            return Err(corrupt(format!("pointer at RVA {rva:#x} still targets .hip_fat")));
        }
    }

    // Step 6: drop the whole pages of `.hip_fat` from the file.
    if fat.size_of_raw_data > 0 {
        let a0 = align_up(fat_rva, PAGE);
        let a1 = (fat_rva + fat.virtual_size as u64) / PAGE * PAGE;
        if a0 < a1 {
            let asz = a1 - a0;
            let pre = a0 - fat_rva;
            let suf = fat.virtual_size as u64 - pre - asz;
            if pre + asz > fat.size_of_raw_data as u64 {
                return Err(CoffError::Unsupported(".hip_fat has fewer raw bytes than its removable pages".into()));
            }
            let del = fat.pointer_to_raw_data as u64 + pre;
            shift_debug_entries(pe, src, &mut buf, del, asz)?;
            buf.delete(del, asz)?;
            let kept = pre + suf;
            sections[fat_idx].size_of_raw_data = if kept == 0 { 0 } else { align_up(kept, fa) as u32 };
            // Raw data behind the removed pages moves up. (A section
            // without raw data may carry any pointer; one into the removed
            // range is left alone rather than wrapped.)
            for s in sections.iter_mut() {
                if s.pointer_to_raw_data as u64 >= del + asz {
                    s.pointer_to_raw_data -= asz as u32;
                }
            }
        }
    }

    // Headers: section table, counts, image size, checksum.
    for (i, s) in sections.iter().enumerate() {
        let o = pe.sect_off + SECTION_HEADER * i;
        headers[o..o + SECTION_HEADER].copy_from_slice(&s.to_bytes());
    }
    let nsec_off = pe.opt_off - 20 + 2;
    headers[nsec_off..nsec_off + 2].copy_from_slice(&(sections.len() as u16).to_le_bytes());
    let soi = pe.opt_off + OPT_SIZE_OF_IMAGE;
    let size_of_image = u32::try_from(size_of_image).map_err(|_| CoffError::Unsupported(format!("SizeOfImage {size_of_image:#x} over 4 GiB")))?;
    headers[soi..soi + 4].copy_from_slice(&size_of_image.to_le_bytes());
    let ck = pe.opt_off + OPT_CHECKSUM;
    if headers.u32_at(ck) != Some(0) {
        headers[ck..ck + 4].fill(0);
        deviations.push("CheckSum cleared (stale after the edit)".to_string());
    }
    buf.write_at(0, &headers)?;
    buf.compact();

    let fat_range = pe.fat_range().unwrap_or((fat.pointer_to_raw_data as u64, 0));
    Ok(HostPlan { format: HostFormat::Pe, layout: buf, wrappers, fat_offset: fat_range.0, fat_size: fat_range.1, deviations })
}

/// Debug directory entries carry file offsets (`PointerToRawData`): shift
/// those behind the `by` bytes removed at `at` (B7; the reference leaves
/// them stale). One pointing into the removed bytes is left as it was.
fn shift_debug_entries(pe: &PeFile, src: &dyn ReadAt, buf: &mut Layout, at_removed: u64, by: u64) -> Result<(), CoffError> {
    let (rva, size) = pe.dir(DIR_DEBUG);
    if rva == 0 || size == 0 {
        return Ok(());
    }
    let Some(off) = pe.rva_to_off(rva as u64) else { return Ok(()) };
    for k in 0..(size as u64 / 28).min(64) {
        let at = off + 28 * k + 24;
        if at + 4 > buf.len() {
            break;
        }
        let b = buf.read_vec(at, 4, src)?;
        let p = b.u32_at(0).unwrap_or(0) as u64;
        if p >= at_removed + by {
            buf.write_at(at, &((p - by) as u32).to_le_bytes())?;
        }
    }
    Ok(())
}
