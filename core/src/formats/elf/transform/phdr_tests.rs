//! PHDR apply (docs/host-binaries.md §5.4) and the old-kernel pin (§5.11)
//! on states built by hand, at the edges no golden reaches: content
//! starting exactly at the program header table, a file-less PT_LOAD
//! before the first content, a table of exactly 16 entries, a table that
//! must move past a segment's zero-fill. Expected values worked out by
//! hand from those sections.

use super::*;

fn seg(p_type: u32, offset: u64, vaddr: u64, filesz: u64, memsz: u64) -> Phdr {
    Phdr { p_type, flags: PF_R, offset, vaddr, paddr: vaddr, filesz, memsz, align: PAGE }
}

fn load(offset: u64, vaddr: u64, filesz: u64, memsz: u64) -> Phdr {
    seg(PT_LOAD, offset, vaddr, filesz, memsz)
}

/// A PT_NOTE: counts as an entry, bounds nothing.
fn note() -> Phdr {
    seg(4, 0x2000, 0x2000, 0x20, 0x20)
}

fn section(offset: u64) -> Shdr {
    Shdr { name: 1, sh_type: SHT_PROGBITS, offset, size: 0x10, ..Default::default() }
}

fn state(src: &Vec<u8>, phoff: u64, phdrs: Vec<Phdr>, shdrs: Vec<Shdr>) -> State<'_> {
    let eh = Ehdr {
        raw: [0; 64],
        e_type: ET_EXEC,
        e_machine: EM_X86_64,
        phoff,
        shoff: 0,
        phentsize: PHDR_SIZE as u16,
        phnum: phdrs.len() as u16,
        shentsize: SHDR_SIZE as u16,
        shnum: shdrs.len() as u16,
        shstrndx: 0,
    };
    State { src, buf: Layout::passthrough(src.len() as u64), eh, phdrs, shdrs, deviations: Vec::new() }
}

/// `p_vaddr` of entry `i` of the table at `phoff` in the output (+16 in
/// an Elf64_Phdr), read back from the bytes.
fn vaddr_in_file(st: &State<'_>, phoff: u64, i: u64) -> u64 {
    let b = st.buf.read_vec(phoff + i * PHDR_SIZE + 16, 8, st.src).unwrap();
    u64::from_le_bytes(b.try_into().unwrap())
}

/// A file of 0x3010 bytes, program headers at 0x40, the first section
/// after them at 0x400: 0x3c0 bytes of room, 17 entries (952 bytes), not 18.
/// The first PT_LOAD (offset 0) is not after the table and bounds nothing.
#[test]
fn phdr_apply_in_place_up_to_the_first_content() {
    let src = vec![0u8; 0x3010];
    let list = |n: usize| [load(0, 0, 0x1000, 0x1000)].into_iter().chain(std::iter::repeat_n(note(), n - 1)).collect::<Vec<_>>();
    let sections = || vec![Shdr::default(), section(0x400)];
    let mut st = state(&src, 0x40, vec![], sections());
    assert!(st.phdr_apply(list(17), &[]).unwrap());
    assert_eq!((st.eh.phoff, st.eh.phnum, st.buf.len()), (0x40, 17, 0x3010));
    let mut st = state(&src, 0x40, vec![], sections());
    assert!(!st.phdr_apply(list(18), &[]).unwrap());
    // A section at e_phoff itself is not after the table: still 17 fit.
    let mut st = state(&src, 0x40, vec![], vec![Shdr::default(), section(0x40), section(0x400)]);
    assert!(st.phdr_apply(list(17), &[]).unwrap());
    // Recorded PT_LOADs bound the room only with file bytes: a file-less
    // one at 0x100 does not, one with bytes there leaves 0xc0 bytes (3
    // entries, not 4).
    let mut st = state(&src, 0x40, vec![], sections());
    assert!(st.phdr_apply(list(4), &[load(0x100, 0x100, 0, 0x100)]).unwrap());
    let mut st = state(&src, 0x40, vec![], sections());
    assert!(st.phdr_apply(list(3), &[load(0x100, 0x100, 0x10, 0x100)]).unwrap());
    let mut st = state(&src, 0x40, vec![], sections());
    assert!(!st.phdr_apply(list(4), &[load(0x100, 0x100, 0x10, 0x100)]).unwrap());
}

/// Relocation: the table goes to the next page boundary after the file's
/// end (0x3010 -> 0x4000), mapped one page above the highest PT_LOAD end
/// (0x203800 -> 0x204000), with room for the list plus its own PT_LOAD
/// rounded up to 16 entries: 15 entries -> 16 slots (0x380 bytes), 16
/// entries -> 32 slots (0x700 bytes).
#[test]
fn phdr_apply_relocates_with_room_for_sixteen_more() {
    let src = vec![0u8; 0x3010];
    for (n, slots) in [(15u64, 16u64), (16, 32)] {
        let table = seg(PT_PHDR, 0x40, 0x40, n * PHDR_SIZE, n * PHDR_SIZE);
        let mut h = vec![table, load(0, 0, 0x1000, 0x1000), load(0x1000, 0x201000, 0x1800, 0x2800)];
        h.resize(n as usize, note());
        let mut st = state(&src, 0x40, h.clone(), vec![Shdr::default(), section(0x100)]);
        assert!(!st.phdr_apply(h.clone(), &h).unwrap());
        let size = slots * PHDR_SIZE;
        assert_eq!((st.eh.phoff, st.eh.phnum, st.buf.len()), (0x4000, n as u16 + 1, 0x4000 + size), "{n} entries");
        assert_eq!(st.phdrs[0], Phdr { offset: 0x4000, vaddr: 0x204000, paddr: 0x204000, filesz: size, memsz: size, ..table });
        assert_eq!(st.phdrs[n as usize], load(0x4000, 0x204000, size, size));
        assert_eq!(st.phdrs.len() as u64, n + 1);
        // The new table's entries are in the file, its own PT_LOAD last.
        assert_eq!(vaddr_in_file(&st, 0x4000, 0), 0x204000);
        assert_eq!(vaddr_in_file(&st, 0x4000, n), 0x204000);
        if n + 1 < slots {
            assert_eq!(vaddr_in_file(&st, 0x4000, n + 1), 0, "zero-filled slot");
        }
    }
}

/// An executable (PT_INTERP) linked at 0x400000 (first PT_LOAD: offset 0
/// at 0x400000, so old kernels look for the table at 0x400000 + e_phoff),
/// with a zero-fill segment up to 0x411000 and its program header table
/// relocated to offset `phoff`, mapped at `vaddr`.
fn executable(phoff: u64, vaddr: u64, interp: bool) -> Vec<Phdr> {
    let size = 16 * PHDR_SIZE;
    let mut v = vec![
        seg(PT_PHDR, phoff, vaddr, size, size),
        load(0, 0x400000, 0x1000, 0x1000),
        load(0x1000, 0x401000, 0x1000, 0x10000),
        load(phoff, vaddr, size, size),
    ];
    if interp {
        v.insert(1, seg(PT_INTERP, 0x200, 0x400200, 0x1c, 0x1c));
    }
    v
}

#[test]
fn pin_moves_a_table_past_the_zero_fill() {
    // Table at 0x3000 mapped at 0x412000: old kernels look at 0x403000,
    // inside the zero-fill [0x401000, 0x411000). The table moves to the
    // offset whose address clears it: 0x411000 - 0x400000 = 0x11000 (the
    // file is only 0x3380 bytes), mapped at 0x411000.
    let src = vec![0u8; 0x3380];
    let mut st = state(&src, 0x3000, executable(0x3000, 0x412000, true), vec![]);
    assert!(pin_phdrs_for_old_kernels(&mut st).unwrap());
    assert_eq!(st.phdrs, executable(0x11000, 0x411000, true));
    assert_eq!((st.eh.phoff, st.buf.len()), (0x11000, 0x11000 + 16 * PHDR_SIZE));
    assert_eq!(vaddr_in_file(&st, 0x11000, 0), 0x411000);
    assert_eq!(vaddr_in_file(&st, 0x11000, 4), 0x411000);
}

#[test]
fn pin_readdresses_a_table_already_past_every_segment() {
    // Table at 0x11000 mapped at 0x412000: 0x400000 + 0x11000 = 0x411000
    // is exactly the end of the other segments, so the table stays where
    // it is and is only mapped there.
    let src = vec![0u8; 0x11000 + 16 * PHDR_SIZE as usize];
    let mut st = state(&src, 0x11000, executable(0x11000, 0x412000, true), vec![]);
    assert!(pin_phdrs_for_old_kernels(&mut st).unwrap());
    assert_eq!(st.phdrs, executable(0x11000, 0x411000, true));
    assert_eq!((st.eh.phoff, st.buf.len()), (0x11000, src.len() as u64));
    assert_eq!(vaddr_in_file(&st, 0x11000, 0), 0x411000);
    assert_eq!(vaddr_in_file(&st, 0x11000, 4), 0x411000);
    // Already where old kernels look: nothing to do.
    let mut st = state(&src, 0x11000, executable(0x11000, 0x411000, true), vec![]);
    assert!(!pin_phdrs_for_old_kernels(&mut st).unwrap());
    // A shared library (no PT_INTERP) is found through its dynamic
    // segment, never through AT_PHDR: left alone.
    let mut st = state(&src, 0x11000, executable(0x11000, 0x412000, false), vec![]);
    assert!(!pin_phdrs_for_old_kernels(&mut st).unwrap());
    assert_eq!(st.phdrs, executable(0x11000, 0x412000, false));
}
