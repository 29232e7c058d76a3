//! The kpack transform of a PE32+ image (the steps and deviations are in
//! the module documentation of [`super`]), as a lazy layout.

use crate::formats::traits::{HostFormat, HostPlan, WrapperRef};
use crate::formats::wrapper::{WrapperKind, MAGIC_HIPK};
use crate::io::{LeBytes, ReadAt};
use crate::layout::Layout;

use super::headers::align_up;
use super::*;

/// The transform of FORMATS.md §4 (with the deviations in the module doc).
pub fn plan(src: &dyn ReadAt, pe: &PeFile, marker: &[u8]) -> Result<HostPlan, PeError> {
    let (fat_idx, fat) = pe.section(FAT_SECTION).map(|(i, s)| (i, s.clone())).ok_or(PeError::NotFat)?;
    let nsect = pe.sections.len();
    let table_end = pe.sect_off + SECTION_HEADER * nsect;
    if table_end + SECTION_HEADER > pe.size_of_headers as usize {
        return Err(PeError::Unsupported("no room in the headers for one more section header".into()));
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
            return Err(PeError::Unsupported(format!("{} bytes of trailing data after the last section", pe.len - raw_end)));
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
        return Err(PeError::Unsupported("image too large for another section".into()));
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
                return Err(PeError::Unsupported(".hip_fat has fewer raw bytes than its removable pages".into()));
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
    let size_of_image = u32::try_from(size_of_image).map_err(|_| PeError::Unsupported(format!("SizeOfImage {size_of_image:#x} over 4 GiB")))?;
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
fn shift_debug_entries(pe: &PeFile, src: &dyn ReadAt, buf: &mut Layout, at_removed: u64, by: u64) -> Result<(), PeError> {
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
