//! The reference kpack ELF transform (FORMATS.md §3, steps A–G), replayed on
//! a [`Layout`] instead of a byte buffer.
//!
//! Every step is the reference's, in the reference's order, including its
//! quirks that decide output bytes (unaligned section header table, dead
//! copies, the stale section offsets of the step-F capacity test, B3).
//! The output is therefore byte-identical to the reference tool's for the
//! same marker — except where the reference is wrong, where we deviate and
//! say so in [`Deviation`]:
//! * B1: for ET_EXEC the wrapper pointer keeps the marker address (the
//!   reference zeroes it and nothing relocates it: a null pointer at run time);
//! * B2: a program header table with room for one more entry is extended in
//!   place (the reference crashes; the newest upstream does the same as us);
//! * B4: a pointer relocated by RELR/REL (implicit addend) keeps the marker
//!   address (the reference zeroes it, so the loader would produce the load
//!   base);
//! * old kernels: an executable's relocated program header table is mapped
//!   where kernels before 5.18 look for it ([`pin_phdrs_for_old_kernels`]),
//!   as the newest upstream does (the reference maps it one page above the
//!   highest segment, and such an executable dies before `main` on EL8).
//!
//! Only headers, `.shstrtab`, relocation tables and the wrappers are read;
//! `.hip_fatbin` never is.

use super::headers::*;
use super::phdr::{old_kernel_phdr_vaddr, relocated_table_segment};
use super::relocs::{in_place_relocated, rela_sections, symbol_target, RelaSection};
use super::{corrupt, vaddr_to_offset, ElfError, ElfFile, MARKER_SECTION, WRAPPER_SECTION};
use crate::formats::wrapper::{MAGIC_HIPF, MAGIC_HIPK, WRAPPER_SIZE};
use crate::io::ReadAt;
use crate::layout::Layout;

const PAGE: u64 = 0x1000;
/// More wrappers than this is not a real binary (librocsparse has 111).
const MAX_WRAPPERS: u64 = 1 << 20;

fn round_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

fn round_down(x: u64) -> u64 {
    x / PAGE * PAGE
}

/// A place where our output deliberately differs from the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deviation {
    /// B1: ET_EXEC wrapper pointers keep the marker address.
    NonPiePointer,
    /// B2: the program header table was extended in place.
    InPlacePhdrs,
    /// B4: RELR/REL-relocated wrapper pointers keep the marker address.
    ImplicitAddend,
    /// An executable's relocated program header table was re-mapped (and
    /// moved if need be) so that old kernels find it.
    OldKernelPhdrs,
}

/// What the planner learned about one wrapper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapperInfo {
    pub index: u32,
    /// The wrapper's original pointer target (virtual address), from its
    /// relocation or in-place value.
    pub target: Option<u64>,
    /// Already HIPK in the input: left alone.
    pub already_kpacked: bool,
}

impl WrapperInfo {
    /// Offset of the wrapper's bundle inside `.hip_fatbin`.
    pub fn fatbin_offset(&self, fatbin: &Shdr) -> Option<u64> {
        let t = self.target?;
        (t >= fatbin.addr && t - fatbin.addr < fatbin.size).then(|| t - fatbin.addr)
    }
}

/// A planned transform: the output as a layout plus what tooling needs.
#[derive(Debug, Clone)]
pub struct ElfPlan {
    pub layout: Layout,
    pub e_type: u16,
    /// The original `.hip_fatbin` header.
    pub fatbin: Shdr,
    pub wrappers: Vec<WrapperInfo>,
    pub deviations: Vec<Deviation>,
    /// Where the marker is mapped (the value wrappers now point to).
    pub marker_vaddr: u64,
}

struct State<'a> {
    src: &'a dyn ReadAt,
    buf: Layout,
    eh: Ehdr,
    /// The program headers as currently recorded for the file.
    phdrs: Vec<Phdr>,
    shdrs: Vec<Shdr>,
    deviations: Vec<Deviation>,
}

impl State<'_> {
    fn write_ehdr(&mut self) -> Result<(), ElfError> {
        Ok(self.buf.write_at(0, &self.eh.to_bytes())?)
    }

    fn read_u64(&self, off: u64) -> Result<u64, ElfError> {
        let b = self.buf.read_vec(off, 8, self.src)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn read_u32(&self, off: u64) -> Result<u32, ElfError> {
        let b = self.buf.read_vec(off, 4, self.src)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }

    fn pad_to_page(&mut self) {
        let len = self.buf.len();
        self.buf.push_zeros(round_up(len) - len);
    }

    fn shdr_table(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.shdrs.len() * SHDR_SIZE as usize);
        for s in &self.shdrs {
            s.write(&mut v);
        }
        v
    }

    /// "PHDR apply" (FORMATS.md §3.3): write `h` in place if it fits before
    /// the first content after the table, else relocate the table to EOF
    /// with its own covering PT_LOAD. `recorded` are the program headers
    /// whose content bounds the free space. Returns whether it fit in place.
    fn phdr_apply(&mut self, mut h: Vec<Phdr>, recorded: &[Phdr]) -> Result<bool, ElfError> {
        let phoff = self.eh.phoff;
        let mut min_content = self.buf.len();
        for s in &self.shdrs {
            if s.sh_type != SHT_NULL && s.offset > phoff {
                min_content = min_content.min(s.offset);
            }
        }
        for p in recorded {
            if p.is_load() && p.filesz > 0 && p.offset > phoff {
                min_content = min_content.min(p.offset);
            }
        }
        let count = u16::try_from(h.len() + 1).map_err(|_| corrupt("too many program headers"))?;
        if (h.len() as u64) * PHDR_SIZE <= min_content.saturating_sub(phoff) {
            let mut bytes = Vec::with_capacity(h.len() * PHDR_SIZE as usize);
            h.iter().for_each(|p| p.write(&mut bytes));
            self.buf.write_at(phoff, &bytes)?;
            self.eh.phnum = count - 1;
            self.write_ehdr()?;
            self.phdrs = h;
            return Ok(true);
        }
        let p_vaddr = round_up(h.iter().filter(|p| p.is_load()).map(Phdr::vend).max().unwrap_or(0));
        self.pad_to_page();
        let new_phoff = self.buf.len();
        let capacity = (h.len() as u64 + 1).div_ceil(16) * 16;
        let alloc = capacity * PHDR_SIZE;
        if let Some(ph) = h.iter_mut().find(|p| p.p_type == PT_PHDR) {
            ph.offset = new_phoff;
            ph.vaddr = p_vaddr;
            ph.paddr = p_vaddr;
            ph.filesz = alloc;
            ph.memsz = alloc;
        }
        h.push(Phdr { p_type: PT_LOAD, flags: PF_R, offset: new_phoff, vaddr: p_vaddr, paddr: p_vaddr, filesz: alloc, memsz: alloc, align: PAGE });
        let mut bytes = Vec::with_capacity(alloc as usize);
        h.iter().for_each(|p| p.write(&mut bytes));
        bytes.resize(alloc as usize, 0);
        self.buf.push_bytes(bytes);
        self.eh.phoff = new_phoff;
        self.eh.phnum = count;
        self.write_ehdr()?;
        self.phdrs = h;
        Ok(false)
    }
}

/// Plans the transform of `elf` (read from `src`) with marker bytes
/// `marker`. Any error means: serve the file unchanged.
pub fn plan(src: &dyn ReadAt, elf: &ElfFile, marker: &[u8]) -> Result<ElfPlan, ElfError> {
    elf.classify()?;
    let fatbin_idx = elf.find_section(super::FATBIN_SECTION).ok_or(ElfError::NotFat)?;
    let fatbin = elf.shdrs[fatbin_idx];
    let seg_idx = elf.find_section(WRAPPER_SECTION).ok_or_else(|| corrupt("no .hipFatBinSegment section"))?;
    let seg = elf.shdrs[seg_idx];
    if !seg.size.is_multiple_of(WRAPPER_SIZE) || seg.size / WRAPPER_SIZE > MAX_WRAPPERS {
        return Err(corrupt(format!(".hipFatBinSegment size {:#x} is not a whole number of wrappers", seg.size)));
    }
    if fatbin.sh_type == SHT_NOBITS || fatbin.offset.checked_add(fatbin.size).is_none_or(|e| e > elf.len) {
        return Err(corrupt(".hip_fatbin has no bytes in the file"));
    }
    let n_wrappers = seg.size / WRAPPER_SIZE;
    let mut st =
        State { src, buf: Layout::passthrough(elf.len), eh: elf.eh.clone(), phdrs: elf.phdrs.clone(), shdrs: elf.shdrs.clone(), deviations: Vec::new() };
    let c_len = marker.len() as u64;

    // Step A: append the marker as an unmapped section; re-append
    // .shstrtab with its name and the whole section header table.
    let c_off = st.buf.len();
    st.buf.push_bytes(marker.to_vec());
    let strndx = st.eh.shstrndx as usize;
    let old_str = st.shdrs[strndx];
    let name_off = u32::try_from(old_str.size).map_err(|_| corrupt(".shstrtab too large"))?;
    let mut names = st.buf.read_vec(old_str.offset, old_str.size as usize, src)?;
    names.extend_from_slice(MARKER_SECTION.as_bytes());
    names.push(0);
    st.shdrs[strndx].offset = st.buf.len();
    st.shdrs[strndx].size = names.len() as u64;
    st.buf.push_bytes(names);
    st.shdrs.push(Shdr { name: name_off, sh_type: SHT_PROGBITS, flags: 0, addr: 0, offset: c_off, size: c_len, link: 0, info: 0, addralign: 1, entsize: 0 });
    let marker_idx = st.shdrs.len() - 1;
    st.eh.shoff = st.buf.len();
    st.eh.shnum = u16::try_from(st.shdrs.len()).map_err(|_| corrupt("too many sections"))?;
    let table = st.shdr_table();
    st.buf.push_bytes(table);
    st.write_ehdr()?;

    // Step B: map the marker with a new read-only PT_LOAD above everything.
    let v = round_up(elf.phdrs.iter().filter(|p| p.is_load()).map(Phdr::vend).max().unwrap_or(0));
    let m_off = if c_off % PAGE != v % PAGE {
        st.pad_to_page();
        let off = st.buf.len();
        st.buf.push_bytes(marker.to_vec());
        off
    } else {
        c_off
    };
    let mut h = st.phdrs.clone();
    h.push(Phdr { p_type: PT_LOAD, flags: PF_R, offset: m_off, vaddr: v, paddr: v, filesz: c_len, memsz: c_len, align: PAGE });
    let recorded = st.phdrs.clone();
    if st.phdr_apply(h, &recorded)? {
        st.deviations.push(Deviation::InPlacePhdrs);
    }
    st.shdrs[marker_idx].flags |= SHF_ALLOC;
    st.shdrs[marker_idx].addr = v;
    st.shdrs[marker_idx].offset = m_off;
    let mut one = Vec::with_capacity(SHDR_SIZE as usize);
    st.shdrs[marker_idx].write(&mut one);
    st.buf.write_at(st.eh.shoff + marker_idx as u64 * SHDR_SIZE, &one)?;

    // Step C: point every wrapper at the marker (in place and in its RELA).
    let mut relas = rela_sections(src, elf)?;
    let implicit = in_place_relocated(src, elf)?;
    let slot_of = |i: u64| seg.addr + WRAPPER_SIZE * i + 8;
    let slots: std::collections::HashSet<u64> = (0..n_wrappers).map(slot_of).collect();
    let mut rela_of_slot = std::collections::HashMap::new();
    for (s, sec) in relas.iter().enumerate() {
        for (k, r) in sec.entries.iter().enumerate() {
            if slots.contains(&r.offset) {
                rela_of_slot.entry(r.offset).or_insert((s, k));
            }
        }
    }
    let mut wrappers = Vec::with_capacity(n_wrappers as usize);
    for i in 0..n_wrappers {
        let slot = slot_of(i);
        let off = vaddr_to_offset(&st.phdrs, slot).ok_or_else(|| corrupt(format!("wrapper {i} is not mapped from the file")))?;
        let in_place = st.read_u64(off)?;
        let target = match rela_of_slot.get(&slot) {
            Some(&(s, k)) => {
                let r = relas[s].entries[k];
                match r.r_type() {
                    R_X86_64_RELATIVE => Some(r.addend as u64),
                    R_X86_64_64 => symbol_target(src, elf, relas[s].link, r.r_sym(), r.addend)?,
                    _ => None,
                }
            }
            None => Some(in_place),
        };
        st.buf.write_at(off, &v.to_le_bytes())?;
        if st.eh.e_type == ET_DYN {
            if let Some(&(s, k)) = rela_of_slot.get(&slot) {
                let new = Rela { offset: slot, info: R_X86_64_RELATIVE as u64, addend: v as i64 };
                relas[s].entries[k] = new;
                st.buf.write_at(relas[s].offset + k as u64 * RELA_SIZE, &new.to_bytes())?;
            }
        }
        wrappers.push(WrapperInfo { index: i as u32, target, already_kpacked: false });
    }

    // Step D: HIPF → HIPK, clear the in-place pointer, store the index.
    for w in wrappers.iter_mut() {
        let i = w.index as u64;
        let off = vaddr_to_offset(&st.phdrs, seg.addr + WRAPPER_SIZE * i).ok_or_else(|| corrupt(format!("wrapper {i} is not mapped from the file")))?;
        match st.read_u32(off)? {
            MAGIC_HIPK => {
                w.already_kpacked = true;
                continue;
            }
            MAGIC_HIPF => {}
            m => return Err(corrupt(format!("wrapper {i} has magic {m:#010x}"))),
        }
        st.buf.write_at(off, &MAGIC_HIPK.to_le_bytes())?;
        let slot = slot_of(i);
        let pointer = if st.eh.e_type == ET_EXEC {
            push_once(&mut st.deviations, Deviation::NonPiePointer);
            v
        } else if implicit.contains(&slot) && !rela_of_slot.contains_key(&slot) {
            push_once(&mut st.deviations, Deviation::ImplicitAddend);
            v
        } else {
            0
        };
        st.buf.write_at(off + 8, &pointer.to_le_bytes())?;
        st.buf.write_at(off + 16, &(i as u32).to_le_bytes())?;
    }

    // Step E: nothing may still point into the device code.
    check_no_fatbin_pointers(&st, elf, &relas, &implicit, &slots, &fatbin)?;

    // Step F: zero-page the device code.
    zero_page(&mut st, &fatbin, fatbin_idx)?;

    // After every step that moves bytes: executables must start on old
    // kernels too.
    if pin_phdrs_for_old_kernels(&mut st)? {
        st.deviations.push(Deviation::OldKernelPhdrs);
    }

    verify(&st)?;
    let mut layout = st.buf;
    layout.compact();
    Ok(ElfPlan { layout, e_type: st.eh.e_type, fatbin, wrappers, deviations: st.deviations, marker_vaddr: v })
}

fn push_once(v: &mut Vec<Deviation>, d: Deviation) {
    if !v.contains(&d) {
        v.push(d);
    }
}

/// Step E, widened: the reference checks RELATIVE addends only; a pointer
/// into `.hip_fatbin` through a symbol (`R_X86_64_64`) or an implicit addend
/// would equally dangle once the section is zero-paged.
fn check_no_fatbin_pointers(
    st: &State<'_>,
    elf: &ElfFile,
    relas: &[RelaSection],
    implicit: &std::collections::HashSet<u64>,
    slots: &std::collections::HashSet<u64>,
    fatbin: &Shdr,
) -> Result<(), ElfError> {
    let inside = |a: u64| a >= fatbin.addr && a - fatbin.addr < fatbin.size;
    for sec in relas {
        for r in &sec.entries {
            let target = match r.r_type() {
                R_X86_64_RELATIVE => Some(r.addend as u64),
                // Symbol 0 (S = 0): the word is the addend itself — an
                // absolute address, which in an image loaded at its link
                // address (non-PIE) can name the fat section.
                R_X86_64_64 if r.r_sym() == 0 => Some(r.addend as u64),
                R_X86_64_64 => symbol_target(st.src, elf, sec.link, r.r_sym(), r.addend)?,
                _ => None,
            };
            if target.is_some_and(inside) {
                return Err(corrupt(format!("relocation at {:#x} still points into .hip_fatbin", r.offset)));
            }
        }
    }
    // In file order, through a window, so a RELR-packed library's many
    // relocated words cost a few reads, not one each.
    let mut offs: Vec<(u64, u64)> = implicit
        .iter()
        .filter(|a| !slots.contains(a))
        .filter_map(|&a| vaddr_to_offset(&st.phdrs, a).map(|o| (o, a)))
        .filter(|(o, _)| o.checked_add(8).is_some_and(|e| e <= st.buf.len()))
        .collect();
    offs.sort_unstable();
    const WINDOW: u64 = 64 << 10;
    let (mut win_at, mut win) = (0u64, Vec::new());
    for (off, a) in offs {
        if off < win_at || off + 8 > win_at + win.len() as u64 {
            win_at = off;
            win = st.buf.read_vec(off, WINDOW.min(st.buf.len() - off) as usize, st.src)?;
        }
        let s = (off - win_at) as usize;
        let v = win.get(s..s + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
        if inside(v) {
            return Err(corrupt(format!("pointer at {a:#x} still points into .hip_fatbin")));
        }
    }
    Ok(())
}

/// Step F (FORMATS.md §3.7): remove the whole pages of `.hip_fatbin` from
/// the file and map that memory as zero-fill instead.
fn zero_page(st: &mut State<'_>, fatbin: &Shdr, fatbin_idx: usize) -> Result<(), ElfError> {
    let (sv, ss, so) = (fatbin.addr, fatbin.size, fatbin.offset);
    let a0 = round_up(sv);
    let a1 = round_down(sv + ss);
    if a0 >= a1 {
        return Ok(());
    }
    let mut asz = a1 - a0;
    if (sv + ss) % PAGE == 0 {
        asz -= PAGE;
        if asz == 0 {
            return Ok(());
        }
    }
    let aoff = so + (a0 - sv);
    let t_idx = st.phdrs.iter().position(|p| p.contains_vaddr(sv)).ok_or_else(|| corrupt(".hip_fatbin is not mapped"))?;
    let t = st.phdrs[t_idx];
    if !t.is_load() {
        return Err(corrupt(".hip_fatbin's first covering segment is not PT_LOAD"));
    }
    if sv + ss > t.vend() || so.checked_sub(t.offset) != Some(sv - t.vaddr) || so + ss > t.offset + t.filesz {
        return Err(corrupt(".hip_fatbin is not wholly inside its segment's file image"));
    }

    // File offsets behind the removed pages move up; one inside them
    // names bytes that are gone (only a corrupt file has anything but
    // `.hip_fatbin` there).
    let shift = |off: u64, what: &str| -> Result<u64, ElfError> {
        if off >= aoff + asz {
            Ok(off - asz)
        } else if off > aoff {
            Err(corrupt(format!("{what} at {off:#x} lies in .hip_fatbin's pages")))
        } else {
            Ok(off)
        }
    };
    st.eh.phoff = shift(st.eh.phoff, "program header table")?;
    st.eh.shoff = shift(st.eh.shoff, "section header table")?;
    st.buf.delete(aoff, asz)?;
    let piece =
        |vaddr: u64, memsz: u64, offset: u64, filesz: u64| Phdr { p_type: PT_LOAD, flags: t.flags, offset, vaddr, paddr: vaddr, filesz, memsz, align: t.align };
    let mut pieces = Vec::with_capacity(4);
    if t.vaddr < sv {
        pieces.push(piece(t.vaddr, sv - t.vaddr, t.offset, (sv - t.vaddr).min(t.filesz)));
    }
    if sv < a0 {
        pieces.push(piece(sv, a0 - sv, so, a0 - sv));
    }
    pieces.push(piece(a0, sv + ss - a0, aoff, 0));
    let pf = (t.offset + t.filesz).saturating_sub(so + ss);
    if sv + ss < t.vend() && pf > 0 {
        pieces.push(piece(sv + ss, t.vend() - (sv + ss), so + ss - asz, pf));
    }
    let mut h = Vec::with_capacity(st.phdrs.len() + 3);
    for (i, p) in st.phdrs.iter().enumerate() {
        if i == t_idx {
            h.extend_from_slice(&pieces);
        } else {
            let mut p = *p;
            p.offset = shift(p.offset, "segment")?;
            h.push(p);
        }
    }
    st.eh.phnum = u16::try_from(h.len()).map_err(|_| corrupt("too many program headers"))?;
    let recorded = h.clone();
    st.phdr_apply(h, &recorded)?;

    for (i, s) in st.shdrs.iter_mut().enumerate() {
        if i == fatbin_idx {
            s.sh_type = SHT_NOBITS;
        } else if s.sh_type == SHT_NOBITS || s.size == 0 {
            // No bytes in the file: any offset will do, none may wrap.
            s.offset = shift(s.offset, "section").unwrap_or(aoff);
        } else {
            s.offset = shift(s.offset, "section")?;
        }
    }
    let table = st.shdr_table();
    st.buf.write_at(st.eh.shoff, &table)?;
    st.write_ehdr()
}

/// Makes an executable's relocated program header table visible where old
/// kernels look for it ([`old_kernel_phdr_vaddr`]). Only files with
/// PT_INTERP (started by the kernel; shared libraries are found by ld.so
/// through their dynamic segment) and only a relocated table. If the
/// address old kernels compute is above every other segment, the table's
/// PT_LOAD and PT_PHDR are simply re-addressed there; otherwise the table is
/// copied to a page-aligned offset far enough into the file that it is
/// (zeros in between; the old copy stays, unmapped). Upstream pins
/// `p_vaddr == p_offset`, which is the same rule for position-independent
/// executables (first segment at vaddr 0) and wrong for the others, whose
/// first segment sits at e.g. 0x400000. Returns whether anything changed.
fn pin_phdrs_for_old_kernels(st: &mut State<'_>) -> Result<bool, ElfError> {
    if !st.phdrs.iter().any(|p| p.p_type == PT_INTERP) {
        return Ok(false);
    }
    let Some(seg) = relocated_table_segment(&st.phdrs, st.eh.phoff) else { return Ok(false) };
    let delta = old_kernel_phdr_vaddr(&st.phdrs, 0).ok_or_else(|| corrupt("first PT_LOAD maps below its file offset"))?;
    let want = |phoff: u64| delta.checked_add(phoff).ok_or_else(|| corrupt("program header table address overflows"));
    if st.phdrs[seg].vaddr == want(st.eh.phoff)? {
        return Ok(false);
    }
    let ceiling = round_up(st.phdrs.iter().enumerate().filter(|(i, p)| *i != seg && p.is_load()).map(|(_, p)| p.vend()).max().unwrap_or(0));
    let mut phoff = st.eh.phoff;
    if want(phoff)? < ceiling {
        // Move the table up to where the computed address clears every
        // other segment.
        phoff = round_up(st.buf.len().max(ceiling - delta));
        st.pad_to_page();
        let len = st.buf.len();
        st.buf.push_zeros(phoff - len);
    }
    let vaddr = want(phoff)?;
    let mut h = st.phdrs.clone();
    for p in h.iter_mut() {
        if p.p_type == PT_PHDR || (p.is_load() && p.offset == st.eh.phoff) {
            p.offset = phoff;
            p.vaddr = vaddr;
            p.paddr = vaddr;
        }
    }
    let mut bytes = Vec::with_capacity(st.phdrs[seg].filesz as usize);
    h.iter().for_each(|p| p.write(&mut bytes));
    bytes.resize(st.phdrs[seg].filesz as usize, 0);
    if phoff == st.eh.phoff {
        st.buf.write_at(phoff, &bytes)?;
    } else {
        st.buf.push_bytes(bytes);
    }
    st.eh.phoff = phoff;
    st.write_ehdr()?;
    st.phdrs = h;
    Ok(true)
}

/// Step G: the reference's structural checks. A failure means our plan
/// (or the input) is wrong, so the file is served unchanged.
fn verify(st: &State<'_>) -> Result<(), ElfError> {
    let loads: Vec<&Phdr> = st.phdrs.iter().filter(|p| p.is_load()).collect();
    for (i, a) in loads.iter().enumerate() {
        if a.offset % PAGE != a.vaddr % PAGE {
            return Err(corrupt(format!("PT_LOAD at {:#x} is misaligned", a.offset)));
        }
        for b in &loads[i + 1..] {
            if a.filesz > 0 && b.filesz > 0 && a.offset < b.offset + b.filesz && b.offset < a.offset + a.filesz {
                return Err(corrupt(format!("PT_LOADs at {:#x} and {:#x} overlap in the file", a.offset, b.offset)));
            }
            if a.offset == b.offset && (a.filesz == 0 || b.filesz == 0) {
                return Err(corrupt(format!("PT_LOADs share file offset {:#x}", a.offset)));
            }
        }
    }
    let names = st.shdrs.get(st.eh.shstrndx as usize).map(|s| s.size).unwrap_or(0);
    if st.shdrs.iter().any(|s| s.name as u64 >= names) {
        return Err(corrupt("section name outside .shstrtab"));
    }
    if let Some(ph) = st.phdrs.iter().find(|p| p.p_type == PT_PHDR) {
        if ph.offset != st.eh.phoff {
            return Err(corrupt("PT_PHDR does not describe the program header table"));
        }
    }
    let (ph0, ph1) = (st.eh.phoff, st.eh.phoff + st.eh.phnum as u64 * PHDR_SIZE);
    let (sh0, sh1) = (st.eh.shoff, st.eh.shoff + st.eh.shnum as u64 * SHDR_SIZE);
    if ph0 < sh1 && sh0 < ph1 {
        return Err(corrupt("section header table overlaps the program header table"));
    }
    if sh1 > st.buf.len() || ph1 > st.buf.len() {
        return Err(corrupt("header table past end of output"));
    }
    Ok(())
}

#[cfg(test)]
mod phdr_tests;
#[cfg(test)]
mod relocs_tests;
#[cfg(test)]
mod verify_tests;
#[cfg(test)]
mod zero_page_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Step E's widened check: a word relocated in place (DT_RELR) that
    /// still points into `.hip_fatbin` after the wrappers are redirected
    /// would be zero-paged under a live pointer, so the file is refused
    /// (served unchanged).
    #[test]
    fn an_in_place_relocated_pointer_into_the_fat_section_is_refused() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../test_assets/bin/librelr.so");
        let mut data = std::fs::read(path).unwrap();
        let marker = crate::formats::marker::Marker::for_group("librelr.so", 0, "lib/librelr.so").encode();
        let elf = ElfFile::parse(&data).unwrap();
        assert!(plan(&data, &elf, &marker).is_ok(), "the asset itself plans");
        let fat = elf.shdrs[elf.find_section(crate::formats::elf::FATBIN_SECTION).unwrap()];
        let seg = elf.shdrs[elf.find_section(WRAPPER_SECTION).unwrap()];
        let slots: Vec<u64> = (0..seg.size / WRAPPER_SIZE).map(|i| seg.addr + WRAPPER_SIZE * i + 8).collect();
        let implicit = in_place_relocated(&data, &elf).unwrap();
        let victim = implicit.iter().copied().filter(|a| !slots.contains(a)).min().expect("a RELR word other than the wrappers'");
        let off = vaddr_to_offset(&elf.phdrs, victim).unwrap() as usize;
        data[off..off + 8].copy_from_slice(&(fat.addr + 64).to_le_bytes());
        let elf = ElfFile::parse(&data).unwrap();
        match plan(&data, &elf, &marker) {
            Err(ElfError::Corrupt(why)) => assert!(why.contains("still points into .hip_fatbin"), "{why}"),
            other => panic!("expected a refusal, got {:?}", other.map(|p| p.layout.len())),
        }
    }
}
