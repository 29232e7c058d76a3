//! The relocations that can hold a wrapper's pointer: RELA (what the
//! reference edits), and REL/RELR, whose addend is the in-place value
//! (B4: the reference ignores them and so zeroes a pointer the loader
//! still relocates).

use std::collections::HashSet;

use super::headers::{sym_value, Rela, Shdr, RELA_SIZE, SHT_REL, SHT_RELA, SHT_RELR, SYM_SIZE};
use super::{corrupt, ElfError, ElfFile};
use crate::io::{read_exact_at, read_vec_at, LeBytes, ReadAt};

/// Relocation tables larger than this, alone or together, are not real
/// (librocsparse's is 295 KB): the bound keeps a file whose section headers
/// point many times at one table from costing memory per header.
const MAX_RELOC_TABLE: u64 = 256 << 20;

/// In-place relocated addresses kept at most (RELR packs 63 per word, so
/// a small table can claim very many; real libraries have far fewer
/// relative relocations than this).
const MAX_IN_PLACE: usize = 1 << 20;

/// The distinct relocation sections of types `types`, read within the
/// overall byte bound (a table listed twice is read once).
fn tables<'a>(elf: &'a ElfFile, types: &[u32]) -> Result<Vec<&'a Shdr>, ElfError> {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut out = Vec::new();
    for sh in elf.shdrs.iter().filter(|s| types.contains(&s.sh_type)) {
        if !seen.insert((sh.sh_type, sh.offset, sh.size)) {
            continue;
        }
        total = total.saturating_add(sh.size);
        if total > MAX_RELOC_TABLE {
            return Err(corrupt(format!("relocation sections total over {MAX_RELOC_TABLE} bytes")));
        }
        out.push(sh);
    }
    Ok(out)
}

/// One SHT_RELA section, parsed.
#[derive(Debug, Clone)]
pub struct RelaSection {
    /// File offset of the section (entries are `RELA_SIZE` apart).
    pub offset: u64,
    /// Section index of its symbol table (`sh_link`).
    pub link: u32,
    pub entries: Vec<Rela>,
}

fn table_bytes(src: &dyn ReadAt, elf: &ElfFile, sh: &Shdr) -> Result<Vec<u8>, ElfError> {
    if sh.size > MAX_RELOC_TABLE || sh.offset.checked_add(sh.size).is_none_or(|e| e > elf.len) {
        return Err(corrupt(format!("relocation section at {:#x}+{:#x} outside the file", sh.offset, sh.size)));
    }
    Ok(read_vec_at(src, sh.offset, sh.size as usize)?)
}

/// All SHT_RELA sections in section-index order.
pub fn rela_sections(src: &dyn ReadAt, elf: &ElfFile) -> Result<Vec<RelaSection>, ElfError> {
    let mut out = Vec::new();
    for sh in tables(elf, &[SHT_RELA])? {
        let entsize = if sh.entsize == 0 { RELA_SIZE } else { sh.entsize };
        if entsize != RELA_SIZE {
            return Err(ElfError::Unsupported(format!("RELA entry size {entsize}")));
        }
        let bytes = table_bytes(src, elf, sh)?;
        let entries = bytes.chunks_exact(RELA_SIZE as usize).filter_map(Rela::parse).collect();
        out.push(RelaSection { offset: sh.offset, link: sh.link, entries });
    }
    Ok(out)
}

/// The value a symbol-based relocation resolves to at link time
/// (`S + A` for a defined symbol), e.g. `-fgpu-rdc` wrappers use
/// `R_X86_64_64` against `__hip_fatbin`.
pub fn symbol_target(src: &dyn ReadAt, elf: &ElfFile, symtab: u32, sym: u32, addend: i64) -> Result<Option<u64>, ElfError> {
    let Some(sh) = elf.shdrs.get(symtab as usize) else { return Ok(None) };
    let off = (sym as u64).checked_mul(SYM_SIZE).and_then(|o| o.checked_add(sh.offset));
    let Some(off) = off.filter(|o| (sym as u64) * SYM_SIZE < sh.size && o + SYM_SIZE <= elf.len) else {
        return Ok(None);
    };
    let mut b = [0u8; SYM_SIZE as usize];
    read_exact_at(src, off, &mut b)?;
    Ok(sym_value(&b).filter(|(_, shndx)| *shndx != 0).map(|(v, _)| v.wrapping_add(addend as u64)))
}

/// Addresses relocated with an implicit (in-place) addend: every SHT_RELR
/// entry and every SHT_REL entry.
pub fn in_place_relocated(src: &dyn ReadAt, elf: &ElfFile) -> Result<HashSet<u64>, ElfError> {
    let mut out = HashSet::new();
    let too_many = || corrupt(format!("over {MAX_IN_PLACE} in-place relocations"));
    for sh in tables(elf, &[SHT_RELR, SHT_REL])? {
        let bytes = table_bytes(src, elf, sh)?;
        if sh.sh_type == SHT_REL {
            for e in bytes.chunks_exact(16) {
                out.insert(e.u64_at(0).unwrap_or(0));
                if out.len() > MAX_IN_PLACE {
                    return Err(too_many());
                }
            }
            continue;
        }
        // RELR: an even word is an address; an odd word is a bitmap of the
        // 63 words after the current position.
        let mut next = 0u64;
        for w in bytes.chunks_exact(8).filter_map(|c| c.u64_at(0)) {
            if w & 1 == 0 {
                out.insert(w);
                if out.len() > MAX_IN_PLACE {
                    return Err(too_many());
                }
                next = w.wrapping_add(8);
            } else {
                let mut bits = w >> 1;
                let mut addr = next;
                while bits != 0 {
                    if bits & 1 != 0 {
                        out.insert(addr);
                        if out.len() > MAX_IN_PLACE {
                            return Err(too_many());
                        }
                    }
                    bits >>= 1;
                    addr = addr.wrapping_add(8);
                }
                next = next.wrapping_add(63 * 8);
            }
        }
    }
    Ok(out)
}
