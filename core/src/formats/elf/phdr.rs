//! Program header tables that old kernels can find: where a kernel before
//! Linux 5.18 looks for an executable's table, and which segment holds a
//! relocated one (the transform's `pin_phdrs_for_old_kernels` uses both).

use super::headers::*;

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
pub(super) fn relocated_table_segment(phdrs: &[Phdr], e_phoff: u64) -> Option<usize> {
    let table = phdrs.iter().find(|p| p.p_type == PT_PHDR)?;
    phdrs.iter().position(|p| p.is_load() && p.offset == e_phoff && p.filesz == table.filesz && p.memsz == table.memsz && table.offset == e_phoff)
}
