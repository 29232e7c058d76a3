//! PE32+ headers: the section table, data directories and base
//! relocations, parsed once into [`PeFile`] with the header bytes kept so
//! the transform can patch them.

use object::pe::{ImageDosHeader, ImageNtHeaders64, ImageSectionHeader};
use object::pod;
use object::LittleEndian as LE;

use crate::formats::wrapper::{Wrapper, WRAPPER_SIZE};
use crate::io::{read_exact_at, read_vec_at, LeBytes, ReadAt};

use super::*;

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
    pub(super) fn parse(b: &[u8]) -> Option<Section> {
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

    pub(super) fn new(
        name: &[u8; 8],
        virtual_size: u32,
        virtual_address: u32,
        size_of_raw_data: u32,
        pointer_to_raw_data: u32,
        characteristics: u32,
    ) -> Section {
        Section { name: *name, virtual_size, virtual_address, size_of_raw_data, pointer_to_raw_data, characteristics, raw: [0; SECTION_HEADER] }
    }

    pub(super) fn to_bytes(&self) -> [u8; SECTION_HEADER] {
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

    pub(super) fn raw_end(&self) -> u64 {
        self.pointer_to_raw_data as u64 + self.size_of_raw_data as u64
    }

    pub(super) fn virt_end(&self) -> u64 {
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

pub(super) fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl PeFile {
    pub fn parse(src: &dyn ReadAt) -> Result<PeFile, PeError> {
        let len = src.size()?;
        if len < 64 {
            return Err(PeError::NotPe);
        }
        let mut dos = [0u8; 64];
        read_exact_at(src, 0, &mut dos)?;
        let (d, _) = pod::from_bytes::<ImageDosHeader>(&dos).map_err(|_| PeError::NotPe)?;
        if d.e_magic.get(LE) != object::pe::IMAGE_DOS_SIGNATURE {
            return Err(PeError::NotPe);
        }
        let nt_off = d.e_lfanew.get(LE) as u64;
        let nt_size = std::mem::size_of::<ImageNtHeaders64>() as u64;
        if nt_off.checked_add(nt_size).is_none_or(|e| e > len) {
            return Err(corrupt("NT headers past end of file"));
        }
        let nt_bytes = read_vec_at(src, nt_off, nt_size as usize)?;
        let (nt, _) = pod::from_bytes::<ImageNtHeaders64>(&nt_bytes).map_err(|_| PeError::NotPe)?;
        if nt.signature.get(LE) != object::pe::IMAGE_NT_SIGNATURE {
            return Err(PeError::NotPe);
        }
        let opt = &nt.optional_header;
        if opt.magic.get(LE) != object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC {
            return Err(PeError::NotPe32Plus);
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
    pub(super) fn validate(&self) -> Result<(), PeError> {
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
    pub(super) fn mapped_after(&self, rva: u64) -> u64 {
        self.sections
            .iter()
            .find(|s| rva >= s.virtual_address as u64 && rva < s.virt_end())
            .map(|s| (s.size_of_raw_data.min(s.virtual_size) as u64).saturating_sub(rva - s.virtual_address as u64))
            .unwrap_or(0)
    }

    pub(super) fn dir(&self, i: usize) -> (u32, u32) {
        self.dirs.get(i).copied().unwrap_or((0, 0))
    }

    pub fn classify(&self) -> Result<(), PeError> {
        if self.section(FAT_SECTION).is_none() {
            return Err(PeError::NotFat);
        }
        if self.section(MARKER_SECTION).is_some() {
            return Err(PeError::AlreadyKpacked);
        }
        Ok(())
    }

    /// File offset and in-file size of `.hip_fat`.
    pub fn fat_range(&self) -> Option<(u64, u64)> {
        let (_, s) = self.section(FAT_SECTION)?;
        (s.size_of_raw_data > 0).then(|| (s.pointer_to_raw_data as u64, s.size_of_raw_data.min(s.virtual_size) as u64))
    }

    /// The wrappers: (index, wrapper, file offset of the wrapper).
    pub(super) fn wrappers(&self, src: &dyn ReadAt) -> Result<Vec<(u32, Wrapper, u64)>, PeError> {
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
    pub(super) fn base_relocs(&self, src: &dyn ReadAt) -> Result<Vec<(u64, u16)>, PeError> {
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
