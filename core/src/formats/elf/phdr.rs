//! Program header tables that old kernels can find: where a kernel before
//! Linux 5.18 looks for an executable's table, and the edit that puts a
//! relocated table there (see [`pin_phdrs_for_old_kernels`]).

use super::headers::*;
use super::transform::{round_up, State};
use super::{corrupt, ElfError};

/// Where a kernel before Linux 5.18 tells the dynamic loader the program
/// header table is (`AT_PHDR`): the first PT_LOAD's `p_vaddr - p_offset`
/// plus `e_phoff` (plus the load bias), i.e. it assumes the table is mapped
/// at the same distance from its file offset as the first segment. Later
/// kernels translate `e_phoff` through the segment that really holds it.
/// `None` for a file with no PT_LOAD.
pub fn old_kernel_phdr_vaddr(phdrs: &[Phdr], e_phoff: u64) -> Option<u64> {
    let first = phdrs.iter().find(|p| p.is_load())?;
    first.vaddr.checked_sub(first.offset)?.checked_add(e_phoff)
}

/// The PT_LOAD that maps nothing but a program header table relocated to
/// the end of the file (the one [`State::phdr_apply`] creates), if the
/// table lives in one. A table inside an ordinary segment (the linker's
/// own, at the start of the first PT_LOAD) is never touched: re-pinning
/// that segment would move the program's text.
fn relocated_table_segment(phdrs: &[Phdr], e_phoff: u64) -> Option<usize> {
    let table = phdrs.iter().find(|p| p.p_type == PT_PHDR)?;
    phdrs.iter().position(|p| p.is_load() && p.offset == e_phoff && p.filesz == table.filesz && p.memsz == table.memsz && table.offset == e_phoff)
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
pub(super) fn pin_phdrs_for_old_kernels(st: &mut State<'_>) -> Result<bool, ElfError> {
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
