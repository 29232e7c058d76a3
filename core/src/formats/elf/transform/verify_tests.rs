//! Step G on states built by hand. On the planner's own output `verify`
//! never fails (every step before it keeps the rules it checks), so each
//! rule is tested here on a state that breaks it at its edge, next to one
//! that keeps it at the same edge. The expectations are the rules as
//! docs/host-binaries.md §5.9 lists them (a PT_LOAD's `p_offset` and
//! `p_vaddr` agree modulo the page size, as the gABI requires; no two
//! PT_LOADs share file bytes or an offset; section names inside
//! `.shstrtab`; PT_PHDR at `e_phoff`; the header tables inside the file and
//! apart), not the planner's output.

use super::*;

/// `verify` never reads file bytes: an empty source will do.
static NO_SOURCE: Vec<u8> = Vec::new();

const LEN: u64 = 0x3000;

/// A header table: file offset and number of entries.
type Table = (u64, u16);

fn load(offset: u64, vaddr: u64, filesz: u64) -> Phdr {
    Phdr { p_type: PT_LOAD, flags: PF_R, offset, vaddr, paddr: vaddr, filesz, memsz: filesz.max(0x100), align: PAGE }
}

/// The null section and `.shstrtab` (16 bytes of names) named `strtab_name`.
fn sections(strtab_name: u32) -> Vec<Shdr> {
    vec![Shdr::default(), Shdr { name: strtab_name, sh_type: 3, offset: 0x2000, size: 0x10, ..Default::default() }]
}

/// A state of `LEN` bytes with the program header table at `ph`
/// (offset, count) and the section header table at `sh`.
fn verify_state(ph: Table, sh: Table, phdrs: Vec<Phdr>, shdrs: Vec<Shdr>) -> Result<(), ElfError> {
    let eh = Ehdr {
        raw: [0; 64],
        e_type: ET_DYN,
        e_machine: EM_X86_64,
        phoff: ph.0,
        shoff: sh.0,
        phentsize: PHDR_SIZE as u16,
        phnum: ph.1,
        shentsize: SHDR_SIZE as u16,
        shnum: sh.1,
        shstrndx: 1,
    };
    let st = State { src: &NO_SOURCE, buf: Layout::passthrough(LEN), eh, phdrs, shdrs, deviations: Vec::new() };
    verify(&st)
}

/// Two PT_LOADs side by side in the file: [0, 0x1000) at 0 and
/// [0x1000, 0x1800) at 0x201000 (same offset modulo the page).
fn a() -> Phdr {
    load(0, 0, 0x1000)
}
fn b() -> Phdr {
    load(0x1000, 0x201000, 0x800)
}

/// The tables where a linker puts them: program headers after the ELF
/// header (2 of them: [0x40, 0xb0)), section headers ending the file
/// (2: [0x2f80, 0x3000)).
const PH: Table = (0x40, 2);
const SH: Table = (LEN - 2 * SHDR_SIZE, 2);

fn refused(r: Result<(), ElfError>, why: &str) -> bool {
    matches!(&r, Err(ElfError::Corrupt(w)) if w.contains(why))
}

#[test]
fn verify_accepts_segments_and_tables_at_their_edges() {
    let phdr = Phdr { p_type: PT_PHDR, offset: 0x40, vaddr: 0x40, filesz: 0x70, memsz: 0x70, ..Default::default() };
    let cases: Vec<(&str, Table, Table, Vec<Phdr>)> = vec![
        ("adjacent segments", PH, SH, vec![a(), b()]),
        ("adjacent segments, the later one first", PH, SH, vec![b(), a()]),
        // A segment without file bytes shares none, wherever its offset.
        ("file-less segments inside another's bytes", PH, SH, vec![load(0x800, 0x400800, 0), a(), b(), load(0x900, 0x400900, 0)]),
        ("PT_PHDR at e_phoff", PH, SH, vec![phdr, a(), b()]),
        // Program headers ending the file, section headers after the ELF header.
        ("program header table ends the file", (LEN - 2 * PHDR_SIZE, 2), (0x40, 2), vec![a(), b()]),
        // [0x40, 0xb0) then [0xb0, 0x130), and [0x40, 0xc0) then [0xc0, 0x130).
        ("section headers right after the program headers", PH, (0xb0, 2), vec![a(), b()]),
        ("program headers right after the section headers", (0xc0, 2), (0x40, 2), vec![a(), b()]),
    ];
    for (what, ph, sh, phdrs) in cases {
        let r = verify_state(ph, sh, phdrs, sections(1));
        assert!(r.is_ok(), "{what}: {r:?}");
    }
}

#[test]
fn verify_refuses_misaligned_or_overlapping_segments() {
    let cases: Vec<(&str, Vec<Phdr>, &str)> = vec![
        ("offset and address differ modulo the page", vec![a(), load(0x1000, 0x201010, 0x800)], "misaligned"),
        // One byte in common, each order, the first segment at offset 0.
        ("one shared byte", vec![load(0, 0, 0x1001), b()], "overlap in the file"),
        ("one shared byte, the later one first", vec![b(), load(0, 0, 0x1001)], "overlap in the file"),
        // A file-less segment at another's first byte: the reference
        // refuses it too (PT_LOADs must not share an offset).
        ("a file-less segment at another's offset", vec![a(), load(0x1000, 0x401000, 0), b()], "share file offset"),
        ("a file-less segment after one at its offset", vec![a(), b(), load(0x1000, 0x401000, 0)], "share file offset"),
    ];
    for (what, phdrs, why) in cases {
        let r = verify_state(PH, SH, phdrs, sections(1));
        assert!(refused(r, why), "{what}: expected {why:?}");
    }
}

#[test]
fn verify_refuses_broken_header_tables() {
    let ok = || vec![a(), b()];
    // Names are offsets into .shstrtab's 16 bytes: 15 is its last byte.
    assert!(verify_state(PH, SH, ok(), sections(15)).is_ok());
    assert!(refused(verify_state(PH, SH, ok(), sections(16)), "section name outside .shstrtab"));
    let stray = Phdr { p_type: PT_PHDR, offset: 0x48, vaddr: 0x48, filesz: 0x70, memsz: 0x70, ..Default::default() };
    assert!(refused(verify_state(PH, SH, vec![stray, a(), b()], sections(1)), "PT_PHDR does not describe"));
    let cases: Vec<(&str, Table, Table, &str)> = vec![
        // 4 program headers [0x40, 0x120), section headers from 0x118.
        ("section headers in the program headers' last entry", (0x40, 4), (0x118, 2), "overlaps the program header table"),
        // 2 section headers [0x40, 0xc0), program headers from 0xb4.
        ("program headers in the section headers' last entry", (0xb4, 2), (0x40, 2), "overlaps the program header table"),
        ("section headers one byte past the end", PH, (SH.0 + 1, 2), "past end of output"),
        ("program headers one byte past the end", (LEN - 2 * PHDR_SIZE + 1, 2), (0x40, 2), "past end of output"),
    ];
    for (what, ph, sh, why) in cases {
        let r = verify_state(ph, sh, ok(), sections(1));
        assert!(refused(r, why), "{what}: expected {why:?}");
    }
}
